// The tiny agent with @opentelemetry/instrumentation-openai: ask, run the two tools, answer.
// Exports over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (protocol from
// OTEL_EXPORTER_OTLP_PROTOCOL; the tests use http/json, what Node sends by default).
"use strict";

const { NodeSDK } = require("@opentelemetry/sdk-node");
const { OpenAIInstrumentation } = require("@opentelemetry/instrumentation-openai");

const sdk = new NodeSDK({
  serviceName: process.env.AGENT_SERVICE_NAME || "node-openai-agent",
  instrumentations: [
    new OpenAIInstrumentation({ captureMessageContent: process.env.AGENT_CAPTURE_CONTENT !== "0" }),
  ],
});
sdk.start();

const OpenAI = require("openai");

const tools = {
  get_weather: ({ city }) => JSON.stringify({ city, forecast: "sunny", celsius: 21 }),
  get_time: ({ city }) => JSON.stringify({ city, time: "14:05" }),
};
const definitions = Object.keys(tools).map((name) => ({
  type: "function",
  function: {
    name,
    description: `${name} for a city.`,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}));

async function main() {
  const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "sk-test" });
  const messages = [
    { role: "system", content: "You are a helpful weather assistant." },
    { role: "user", content: "What is the weather and the time in Paris?" },
  ];
  for (let i = 0; i < 4; i += 1) {
    const response = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages,
      tools: definitions,
    });
    const message = response.choices[0].message;
    if (!message.tool_calls || message.tool_calls.length === 0) break;
    messages.push({ role: "assistant", content: message.content, tool_calls: message.tool_calls });
    for (const call of message.tool_calls) {
      const result = tools[call.function.name](JSON.parse(call.function.arguments));
      messages.push({ role: "tool", tool_call_id: call.id, content: result });
    }
  }
  await sdk.shutdown();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
