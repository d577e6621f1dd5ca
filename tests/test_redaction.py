"""The redaction engine (pure): detectors, JSON paths, skip, rule matching and caching."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.redaction import (
    DETECTORS,
    MAX_JSON_DEPTH,
    NO_RULES,
    Rule,
    compile_rules,
    mask_text,
    validate_rule,
)

ALL = tuple(DETECTORS.values())


def rules(*items: Rule):
    return compile_rules(tuple(items))


MASK_ALL = Rule("mask-all", "mask", tuple(DETECTORS))


# --- Detectors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail jane.doe+x@example.co.uk now", "mail [REDACTED:email] now"),
        (
            "Authorization: Bearer eyJhbGciOi.J9abc-def_ghi",
            "Authorization: Bearer [REDACTED:bearer]",
        ),
        ("key sk-proj-AbCdEfGhIjKlMnOpQrStUv12 used", "key [REDACTED:api_key] used"),
        ("ghp_" + "a1B2" * 9, "[REDACTED:api_key]"),
        ("aws AKIAIOSFODNN7EXAMPLE", "aws [REDACTED:api_key]"),
        (
            "https://x.io/?api_key=9f8e7d6c5b4a39281706&q=1",
            "https://x.io/?api_key=[REDACTED:api_key]&q=1",
        ),
        ('{"token": "Zx9Qw8Er7Ty6Ui5Op4"}', '{"token": "[REDACTED:api_key]"}'),
        ("password=hunter2hunter2", "password=[REDACTED:api_key]"),
        ("card 4111 1111 1111 1111 ok", "card [REDACTED:card] ok"),
        ("card 5500-0000-0000-0004.", "card [REDACTED:card]."),
        ("amex 378282246310005", "amex [REDACTED:card]"),
    ],
)
def test_detectors_mask_secrets_and_pii(text, expected):
    assert mask_text(text, ALL) == expected


@pytest.mark.parametrize(
    "text",
    [
        "call_abc123 and msg_01HZX3K9Q7",  # ordinary ids
        "550e8400-e29b-41d4-a716-446655440000",  # a UUID on its own
        "session_id=a8f5f167f44f4964e6c998dee827110c",  # ids are not secrets
        "max_tokens=4096 and tokens: 1234567890123",
        "at 1712345678901 ms",  # a 13-digit millisecond timestamp
        "order 4111111111111112",  # fails the Luhn check
        "phone +41 44 668 18 00",
        "token=abcdefghijklmnop",  # no digits: a word, not a random token
        "2024-01-15 12:30:45",
        "Bearer",  # the word alone
        "price 12.50 @ noon",
    ],
)
def test_ordinary_text_and_ids_are_left_alone(text):
    assert mask_text(text, ALL) == text


def test_only_the_rules_detectors_apply():
    text = "jane@example.com paid with 4111111111111111"
    assert mask_text(text, (DETECTORS["email"],)) == "[REDACTED:email] paid with 4111111111111111"


# --- Arguments and responses -----------------------------------------------------------------


def test_mask_walks_every_string_of_the_arguments_and_the_response_text():
    compiled = rules(MASK_ALL)
    arguments = {
        "to": ["a@b.io", "plain"],
        "nested": {"api_key": "Q1w2E3r4T5y6U7i8", "count": 3, "card": 4111111111111111},
        "password": "short",
        "max_tokens": 100,
    }
    out = compiled.redact("send", arguments, "sent to a@b.io")
    assert out.arguments == {
        "to": ["[REDACTED:email]", "plain"],
        "nested": {"api_key": "[REDACTED:api_key]", "count": 3, "card": "[REDACTED:card]"},
        "password": "[REDACTED:api_key]",
        "max_tokens": 100,
    }
    assert out.response == "sent to [REDACTED:email]"
    assert out.rule_names == ["mask-all"]
    assert arguments["to"][0] == "a@b.io"  # the input is not mutated


def test_a_json_response_stays_valid_json_after_masking():
    compiled = rules(MASK_ALL)
    response = json.dumps({"card": 4111111111111111, "owner": "x@y.org", "n": 1})
    out = compiled.redact("pay", None, response)
    assert json.loads(out.response) == {
        "card": "[REDACTED:card]",
        "owner": "[REDACTED:email]",
        "n": 1,
    }


def test_nothing_found_means_no_rule_name_and_the_same_objects():
    compiled = rules(MASK_ALL)
    arguments = {"q": "weather"}
    out = compiled.redact("search", arguments, "sunny")
    assert out.arguments is arguments and out.response == "sunny"
    assert out.rule_names == []


def test_redact_paths_in_arguments_and_json_responses_with_wildcards():
    compiled = rules(Rule("paths", "redact_paths", ("user.ssn", "items.*.password", "0.secret")))
    out = compiled.redact(
        "crm",
        {
            "user": {"ssn": "123-45-6789", "name": "Jo"},
            "items": [{"password": "p1", "id": 1}, {"id": 2}],
        },
        json.dumps([{"secret": "s", "keep": True}]),
    )
    assert out.arguments == {
        "user": {"ssn": "[REDACTED]", "name": "Jo"},
        "items": [{"password": "[REDACTED]", "id": 1}, {"id": 2}],
    }
    assert json.loads(out.response) == [{"secret": "[REDACTED]", "keep": True}]
    assert out.rule_names == ["paths"]


def test_paths_leave_text_responses_and_missing_keys_alone():
    compiled = rules(Rule("paths", "redact_paths", ("user.ssn",)))
    out = compiled.redact("crm", {"other": 1}, "user.ssn is 123")
    assert out.arguments == {"other": 1} and out.response == "user.ssn is 123"
    assert out.rule_names == []


def test_skip_drops_the_call_and_names_the_rule():
    compiled = rules(Rule("no-debug", "skip", (), "debug_*"))
    assert compiled.redact("debug_dump", {"a": 1}, "x").skipped_by == "no-debug"
    assert compiled.redact("search", {"a": 1}, "x").skipped_by is None


def test_rules_apply_by_function_name_glob_and_combine():
    compiled = rules(
        Rule("crm-paths", "redact_paths", ("ssn",), "crm_*"),
        Rule("emails", "mask", ("email",)),
    )
    crm = compiled.redact("crm_lookup", {"ssn": "1", "mail": "a@b.io"}, None)
    assert crm.arguments == {"ssn": "[REDACTED]", "mail": "[REDACTED:email]"}
    assert crm.rule_names == ["crm-paths", "emails"]
    other = compiled.redact("search", {"ssn": "1", "mail": "a@b.io"}, None)
    assert other.arguments == {"ssn": "1", "mail": "[REDACTED:email]"}


def test_compiled_rules_are_cached_by_content():
    a = (Rule("r", "mask", ("email",)),)
    assert compile_rules(a) is compile_rules((Rule("r", "mask", ("email",)),))
    assert compile_rules(()) is NO_RULES
    assert NO_RULES.policy_for("anything").is_noop


@pytest.mark.parametrize(
    ("kind", "value", "ok"),
    [
        ("mask", ["email", "card"], True),
        ("mask", ["phone"], False),
        ("mask", [], False),
        ("redact_paths", ["a.b", "items.*.x"], True),
        ("redact_paths", ["a."], False),
        ("skip", [], True),
    ],
)
def test_validate_rule(kind, value, ok):
    assert (validate_rule(kind, value) is None) is ok


# --- Encodings and keys (issue 13): redaction sees decoded text and object keys ---------------

EMAIL_RULE = rules(Rule("emails", "mask", ("email",)))


def response_of(compiled, text: str) -> str:
    return compiled.redact("tool", None, text).response


@pytest.mark.parametrize(
    ("detector", "text", "expected"),
    [
        ("email", "url to=jane.doe%40example.com&x=1", "url to=[REDACTED:email]&x=1"),
        ("email", 'js "jane\\u0040example.com"', 'js "[REDACTED:email]"'),
        ("email", "mail müller@beispiel.de", "mail [REDACTED:email]"),
        ("email", "%%%%%%jane@example.com!", "[REDACTED:email]!"),
        ("api_key", "PASSWORD=CorrectHorseBattery", "PASSWORD=[REDACTED:api_key]"),
        ("api_key", "Authorization: Zx9Qw8Er7Ty6Ui5", "Authorization: [REDACTED:api_key]"),
        ("api_key", "Token=abcdefghijklmnopq", "Token=abcdefghijklmnopq"),
        ("api_key", "token=token=token=token=token=", "token=token=token=token=token="),
        ("api_key", "mytoken=Zx9Qw8Er7Ty6Ui5", "mytoken=Zx9Qw8Er7Ty6Ui5"),
    ],
)
def test_other_spellings_and_secret_names_in_any_case(detector, text, expected):
    assert mask_text(text, (DETECTORS[detector],)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "x_api_key=Q1w2E3r4T5y6U7i8",
        "GITHUB_TOKEN: Zx9Qw8Er7Ty6Ui5Op4",
        "X-Api-Key: Zx9Qw8Er7Ty6Ui5",
    ],
)
def test_secret_names_after_a_prefix_are_found(text):
    assert mask_text(text, ALL).endswith("[REDACTED:api_key]")


def test_an_escaped_at_sign_inside_a_json_result_is_decoded_before_masking():
    text = '{"to": "jane.doe\\u0040example.com", "note": "gr\\u00fc\\u00dfe"}'
    out = response_of(EMAIL_RULE, text)
    assert json.loads(out) == {"to": "[REDACTED:email]", "note": "grüße"}
    assert "jane" not in out and "example" not in out


def test_an_address_used_as_a_key_is_masked_and_no_value_is_lost():
    text = json.dumps({"jane@example.com": 1, "bob@example.com": {"carol@example.com": 2}, "n": 3})
    assert json.loads(response_of(EMAIL_RULE, text)) == {
        "[REDACTED:email]": 1,
        "[REDACTED:email] #2": {"[REDACTED:email]": 2},
        "n": 3,
    }
    arguments = {"to": {"jane@example.com": "a", "JANE@example.com": "b", "[REDACTED:email]": "c"}}
    out = EMAIL_RULE.redact("tool", arguments, None)
    assert out.arguments == {
        "to": {"[REDACTED:email]": "a", "[REDACTED:email] #2": "b", "[REDACTED:email] #3": "c"}
    }
    assert out.rule_names == ["emails"]


def test_a_json_document_inside_a_string_is_decoded_too():
    inner = json.dumps({"to": "jane@example.com"}, ensure_ascii=True).replace("@", "\\u0040")
    out = EMAIL_RULE.redact("tool", {"payload": inner}, json.dumps([inner]))
    assert json.loads(out.arguments["payload"]) == {"to": "[REDACTED:email]"}
    assert json.loads(json.loads(out.response)[0]) == {"to": "[REDACTED:email]"}


def test_a_json_result_without_findings_is_stored_byte_for_byte():
    text = '{ "q" : "caf\\u00e9\\n", "n": [1, 2.50, null] }'
    out = rules(MASK_ALL).redact("tool", None, text)
    assert out.response == text and out.rule_names == []


def test_numbers_under_secret_keys_and_card_numbers_are_masked_in_json():
    text = '{"password": 123456789012, "max_tokens": 4096, "card": 4111111111111111}'
    assert json.loads(response_of(rules(MASK_ALL), text)) == {
        "password": "[REDACTED:api_key]",
        "max_tokens": 4096,
        "card": "[REDACTED:card]",
    }


def test_json_nested_past_the_limit_is_masked_as_text_without_recursion_errors():
    deep = "[" * 50_000 + '"jane@example.com"' + "]" * 50_000
    assert response_of(EMAIL_RULE, deep) == deep.replace("jane@example.com", "[REDACTED:email]")
    just_deep_enough = "[" * (MAX_JSON_DEPTH - 1) + '"jane\\u0040example.com"' + "]" * 99
    assert "jane" not in response_of(EMAIL_RULE, just_deep_enough)
    paths = rules(Rule("paths", "redact_paths", ("0",)))
    assert response_of(paths, deep) == deep  # text: paths do not apply


def test_arguments_nested_past_the_limit_are_replaced_not_inspected():
    arguments: dict = {"mail": "jane@example.com"}
    node = arguments
    for _ in range(MAX_JSON_DEPTH + 10):
        node["next"] = {}
        node = node["next"]
    out = EMAIL_RULE.redact("tool", arguments, None).arguments
    assert out["mail"] == "[REDACTED:email]"
    depth, node = 1, out["next"]
    while isinstance(node, dict):
        depth, node = depth + 1, node["next"]
    assert depth == MAX_JSON_DEPTH and node == "[REDACTED]"


def test_strings_holding_nul_are_masked_one_by_one():
    arguments = {"a": "x\x00jane@example.com", "b": ["bob@example.com", "\x00"]}
    assert EMAIL_RULE.redact("tool", arguments, None).arguments == {
        "a": "x\x00[REDACTED:email]",
        "b": ["[REDACTED:email]", "\x00"],
    }


# A JSON value with addresses hidden in keys, values and nested documents.
json_leaves = st.one_of(
    st.sampled_from(["jane@example.com", "bob.x@mail.example.org", "plain", "caf\u00e9", "4 @ x"]),
    st.integers(-5, 5),
    st.none(),
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["k", "jane@example.com", "bob.x@mail.example.org", "[REDACTED:email]"]
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=20,
)


def _leaf_count(value) -> int:
    if isinstance(value, dict):
        return sum(_leaf_count(v) for v in value.values())
    if isinstance(value, list):
        return sum(_leaf_count(v) for v in value)
    return 1


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=3), st.booleans())
def test_any_spelling_of_a_json_result_is_masked_alike(document, indent):
    """ASCII escapes or not, indented or not: the same decoded result, no address left in any
    form, every value kept."""
    spellings = [
        json.dumps(document, ensure_ascii=ascii_only, indent=2 if indent else None)
        for ascii_only in (True, False)
    ]
    masked = [response_of(EMAIL_RULE, text) for text in spellings]
    assert json.loads(masked[0]) == json.loads(masked[1])
    for text in masked:
        assert "example" not in text and "\\u0040" not in text
        assert _leaf_count(json.loads(text)) == _leaf_count(document)


CARD_REFERENCE = re.compile(r"(?<![0-9-])[2-6][0-9](?:[ -]?[0-9]){11,17}(?![0-9-]|[ -][0-9])")


def _reference_card_mask(text: str) -> str:
    """The card detector as first written (forwards, quadratic on long digit groups)."""

    def luhn_ok(digits: str) -> bool:
        total = 0
        for i, ch in enumerate(reversed(digits)):
            d = int(ch) * (2 if i % 2 else 1)
            total += d - 9 if d > 9 else d
        return total % 10 == 0

    def card(m: re.Match[str]) -> str:
        digits = m.group().replace(" ", "").replace("-", "")
        return "[REDACTED:card]" if luhn_ok(digits) else m.group()

    return CARD_REFERENCE.sub(card, text)


def joined(pieces: list[str], max_size: int) -> st.SearchStrategy[str]:
    """Texts made of `pieces`, chosen to meet the edges of one detector."""
    return st.lists(st.sampled_from(pieces), max_size=max_size).map("".join)


@settings(max_examples=500, deadline=None)
@given(joined(["4111", "1111", "5500", "0004", "3", "1", " ", "-", "x", "  ", "\u0661"], 20))
def test_the_card_detector_finds_what_the_forward_pattern_found(text):
    assert mask_text(text, (DETECTORS["card"],)) == _reference_card_mask(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("ab1.-_%+@ \u00e9"), max_size=40))
def test_masking_twice_changes_nothing_more(text):
    once = mask_text(text, ALL)
    assert mask_text(once, ALL) == once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(r"[2-6][0-9]{12,18}", fullmatch=True), max_size=30))
def test_many_numbers_in_one_text_are_each_checked(numbers):
    text = ", ".join(numbers)
    assert mask_text(text, (DETECTORS["card"],)) == _reference_card_mask(text)


def _reference_assigned_mask(text: str) -> str:
    """Secret names and their values, one match at a time (what the detector does at once)."""
    value = r"[A-Za-z0-9_\-./+=~]{12,}"
    names = "|".join(
        [
            *("password", "passwd", "secret(?:[_-]?key)?", "client[_-]?secret"),
            *("private[_-]?key", "api[_-]?key", "apikey", "access[_-]?key"),
            *("access[_-]?token", "auth[_-]?token", "refresh[_-]?token", "id[_-]?token"),
            *("token", "pwd", "authorization"),
        ]
    )
    pattern = re.compile(rf"(?i)(?<![A-Za-z0-9])({names})(\"?'?\s*[:=]\s*\"?'?)({value})")

    def secret(m: re.Match[str]) -> str:
        always = re.search("(?i)password|passwd|secret|private[_-]?key", m.group(1))
        mixed = re.search("[0-9]", m.group(3)) and re.search("[A-Za-z]", m.group(3))
        return m.group(1) + m.group(2) + "[REDACTED:api_key]" if always or mixed else m.group()

    return pattern.sub(secret, text)


@settings(max_examples=500, deadline=None)
@given(joined(["Token", "PASSWORD", "api-key", "x", "_", "=", ": ", '"', " ", "İ", "a1", "b"], 25))
def test_secret_values_are_found_where_one_match_at_a_time_finds_them(text):
    assert mask_text(text, (DETECTORS["api_key"],)) == _reference_assigned_mask(text)


@pytest.mark.parametrize("digits", ["\u0661", "\uff11", "\u00b2", "\u0967"])
def test_digits_of_other_scripts_are_no_card_and_no_error(digits):
    text = f"card 4{digits * 15} and 4111 1111 1111 1111"
    assert mask_text(text, ALL) == f"card 4{digits * 15} and [REDACTED:card]"


# --- Content that is no tool call's ------------------------------------------------------------


def test_a_urls_password_is_masked_and_its_user_and_host_kept():
    masked = {
        "postgres://app:hunter2-db@db.internal:5432/app": (
            "postgres://app:[REDACTED:api_key]@db.internal:5432/app"
        ),
        "see https://bob:pw@example.com/x": "see https://bob:[REDACTED:api_key]@example.com/x",
        "https://:only-a-password@h/": "https://:[REDACTED:api_key]@h/",
        # no password: left alone
        "https://example.com:8443/a@b": "https://example.com:8443/a@b",
        "https://user@example.com/": "https://user@example.com/",
        "ssh://git@host:repo": "ssh://git@host:repo",
    }
    assert {text: mask_text(text, (DETECTORS["api_key"],)) for text in masked} == masked


def test_content_gets_the_mask_rules_that_name_no_tool_only():
    compiled = rules(
        Rule("keys", "mask", ("api_key",)),
        Rule("crm-mails", "mask", ("email",), function_name="crm_*"),
        Rule("ssn", "redact_paths", ("ssn",)),
        Rule("no-debug", "skip"),
    )
    key = "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2"
    value = {"ssn": "1", "note": f"key {key}, mail a@b.io", "list": [f"Bearer {key}", 3]}
    masked, names = compiled.content_policy.mask(value)
    assert masked == {
        "ssn": "1",
        "note": "key [REDACTED:api_key], mail a@b.io",
        "list": ["Bearer [REDACTED:api_key]", 3],
    }
    assert names == ["keys"]
    assert value["note"] == f"key {key}, mail a@b.io"  # the value itself is not changed
    assert compiled.content_policy.mask("nothing here") == ("nothing here", [])
    assert NO_RULES.content_policy.mask(key) == (key, [])
