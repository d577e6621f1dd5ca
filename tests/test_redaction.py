"""The redaction engine (pure): detectors, JSON paths, skip, rule matching and caching."""

from __future__ import annotations

import json

import pytest

from webapp.redaction import (
    DETECTORS,
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
