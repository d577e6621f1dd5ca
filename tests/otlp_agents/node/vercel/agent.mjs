// The two-turn weather agent on the Vercel AI SDK (issue 21): generateText, or streamText with
// AGENT_STREAM=1, with two tools and several steps (stopWhen: stepCountIs(5)), and
// experimental_telemetry on; the session id goes in the telemetry metadata when
// AGENT_CONVERSATION_ID is set. The model is the OpenAI provider's Chat Completions model
// against the fake server (OPENAI_BASE_URL). Spans go over OTLP/HTTP to
// OTEL_EXPORTER_OTLP_ENDPOINT, JSON or protobuf by OTEL_EXPORTER_OTLP_PROTOCOL.
import { NodeSDK } from "@opentelemetry/sdk-node";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const sdk = new NodeSDK({ serviceName: process.env.AGENT_SERVICE_NAME || "vercel-ai-agent" });
sdk.start();

const SYSTEM = "You are a helpful weather assistant.";
const PROMPTS = ["What is the weather and the time in Paris?", "And what is the weather in Lyon?"];
const city = jsonSchema({
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
});
const tools = {
  get_weather: tool({
    description: "Get weather for a city.",
    inputSchema: city,
    execute: async ({ city }) => JSON.stringify({ city, forecast: "sunny", celsius: 21 }),
  }),
  get_time: tool({
    description: "Get time for a city.",
    inputSchema: city,
    execute: async ({ city }) => JSON.stringify({ city, time: "14:05" }),
  }),
};

async function main() {
  const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "sk-test" });
  const model = openai.chat("gpt-4o-mini");
  const metadata = {};
  if (process.env.AGENT_CONVERSATION_ID) {
    metadata[process.env.AGENT_SESSION_KEY || "sessionId"] = process.env.AGENT_CONVERSATION_ID;
  }
  const telemetry = { isEnabled: true, functionId: "weather-agent", metadata };
  const messages = [];
  for (const prompt of PROMPTS) {
    messages.push({ role: "user", content: prompt });
    const options = {
      model,
      system: SYSTEM,
      messages,
      tools,
      stopWhen: stepCountIs(5),
      experimental_telemetry: telemetry,
    };
    let response;
    if (process.env.AGENT_STREAM === "1") {
      const result = streamText(options);
      for await (const _ of result.textStream) {
        // consume the stream
      }
      response = await result.response;
      console.log(await result.text);
    } else {
      const result = await generateText(options);
      response = result.response;
      console.log(result.text);
    }
    messages.push(...response.messages);
  }
  await sdk.shutdown();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
