"""Chat templates render exactly as transformers' apply_chat_template(tokenize=False,
add_generation_prompt=True) does, byte for byte, from the same tokenizer directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tokenizers
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

from triton_sdk.llm import ChatTemplateError, load_chat_template

TEMPLATES = Path(__file__).parent / "chat_templates"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, in °C",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "e.g. 서울 or <Paris>"}},
            "required": ["city"],
        },
    },
}

CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "system_and_user": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "안녕하세요 & <hello>"},
    ],
    "several_turns": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "  Hello!  "},
        {"role": "user", "content": "Tell me a story\nin two lines"},
    ],
    "tool_round_trip": [
        {"role": "user", "content": "Weather in Seoul?"},
        {
            "role": "assistant",
            "content": None,  # dropped, as transformers drops None values
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "서울"}},
                }
            ],
        },
        {"role": "tool", "content": '{"celsius": 21}'},
        {"role": "user", "content": "Thanks"},
    ],
    "reasoning": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning": "two and two"},
        {"role": "user", "content": "and 3+3?"},
    ],
}

CASES = [
    ("chatml_tools.jinja", "system_and_user", None),
    ("chatml_tools.jinja", "tool_round_trip", [WEATHER_TOOL]),
    ("chatml_tools.jinja", "several_turns", None),
    ("alternating.jinja", "several_turns", None),
    ("headers.jinja", "system_and_user", None),
    ("headers.jinja", "reasoning", None),
    ("headers.jinja", "several_turns", None),
]


def tokenizer_directory(target: Path, template: str, *, bos_as_object: bool) -> Path:
    """A Hugging Face tokenizer directory: tokenizer.json and tokenizer_config.json."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    model.save(str(target / "tokenizer.json"))
    bos: Any = {"__type": "AddedToken", "content": "<s>", "normalized": False}
    bos = bos if bos_as_object else "<s>"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": template,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return target


@pytest.mark.parametrize(("template", "conversation", "tools"), CASES)
def test_rendering_equals_transformers(
    tmp_path: Path, template: str, conversation: str, tools: list[dict[str, Any]] | None
) -> None:
    source = (TEMPLATES / template).read_text(encoding="utf-8")
    directory = tokenizer_directory(tmp_path, source, bos_as_object=template == "headers.jinja")
    messages = CONVERSATIONS[conversation]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    expected = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    for given in (directory / "tokenizer_config.json", directory):
        rendered = load_chat_template(given).render(messages, tools=tools)
        assert rendered == expected
    assert "<s>" in expected or template == "chatml_tools.jinja"  # bos_token reached the template


def test_extra_variables_override_and_reach_the_template(tmp_path: Path) -> None:
    source = (TEMPLATES / "headers.jinja").read_text(encoding="utf-8")
    directory = tokenizer_directory(tmp_path, source, bos_as_object=False)
    messages = CONVERSATIONS["system_and_user"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    variables = {"date_string": "24 Nov 2026", "bos_token": "<BOS>"}
    expected = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **variables
    )
    rendered = load_chat_template(directory).render(messages, variables=variables)
    assert rendered == expected
    assert "Today: 24 Nov 2026" in rendered
    assert rendered.startswith("<BOS>")


def test_a_template_string_and_a_jinja_file(tmp_path: Path) -> None:
    source = (TEMPLATES / "chatml_tools.jinja").read_text(encoding="utf-8")
    (tmp_path / "chat.jinja").write_text(source, encoding="utf-8")
    messages = CONVERSATIONS["system_and_user"]
    from_string = load_chat_template(source).render(messages)
    assert load_chat_template(tmp_path / "chat.jinja").render(messages) == from_string
    assert from_string.endswith("<|im_start|>assistant\n")


def test_a_plain_template_sees_empty_bos_and_eos_tokens(tmp_path: Path) -> None:
    """Without a tokenizer config, bos_token and eos_token are empty strings (as API.md
    says), so a template that closes each turn with eos_token renders."""
    source = (TEMPLATES / "alternating.jinja").read_text(encoding="utf-8")
    (tmp_path / "chat.jinja").write_text(source, encoding="utf-8")
    messages = CONVERSATIONS["several_turns"]
    expected = render_jinja_template(
        [messages], chat_template=source, add_generation_prompt=True, bos_token="", eos_token=""
    )[0][0]
    assert load_chat_template(source).render(messages) == expected
    assert load_chat_template(tmp_path / "chat.jinja").render(messages) == expected
    assert expected.startswith("[INST] Hi [/INST]  Hello!  [INST]")


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path: Path) -> None:
    config = {
        "chat_template": [
            {"name": "default", "template": "plain:{{ messages[0].content }}"},
            {"name": "tool_use", "template": "tools:{{ tools | length }}"},
        ]
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    template = load_chat_template(tmp_path / "tokenizer_config.json")
    messages = [{"role": "user", "content": "hi"}]
    assert template.render(messages) == "plain:hi"
    assert template.render(messages, tools=[WEATHER_TOOL]) == "tools:1"


def test_raise_exception_is_a_typed_error() -> None:
    source = (TEMPLATES / "alternating.jinja").read_text(encoding="utf-8")
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        load_chat_template(source).render(messages)


def test_the_sandbox_holds() -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError, match="failed"):
        load_chat_template(escape).render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no-such-file.json", r"neither a Jinja template .*\(no-such-file.json does not exist\)"),
        ("/no/such/template.j2", r"\(/no/such/template.j2 does not exist\)"),
        ("{{ unclosed", "does not parse"),
    ],
)
def test_bad_templates_say_why(value: str, message: str) -> None:
    with pytest.raises(ChatTemplateError, match=message):
        load_chat_template(value).render([{"role": "user", "content": "x"}])


def test_an_empty_template_is_refused_not_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Path("") is ".": a tokenizer_config.json in the working directory was used.
    tokenizer_directory(tmp_path, "FROM CWD {{ messages[0].content }}", bos_as_object=False)
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        with pytest.raises(ChatTemplateError, match="chat_template is empty"):
            load_chat_template(empty)


def test_tools_that_are_not_a_list_of_mappings_are_refused_as_on_the_openai_route() -> None:
    # The template saw tools=["a", "b", "c"] for tools="abc".
    template = load_chat_template("{{ tools }}")
    messages = [{"role": "user", "content": "x"}]
    with pytest.raises(ChatTemplateError, match="tools is a list of mappings, got str"):
        template.render(messages, tools="abc")  # type: ignore[arg-type]
    with pytest.raises(ChatTemplateError, match="tool 1 is a int, not a mapping"):
        template.render(messages, tools=[{"type": "function"}, 2])  # type: ignore[list-item]


def test_documents_reach_the_template_as_transformers_passes_them() -> None:
    template = load_chat_template("{% for d in documents %}[{{ d.text }}]{% endfor %}")
    documents = [{"text": "a"}, {"text": "b"}]
    rendered = template.render(
        [{"role": "user", "content": "x"}], variables={"documents": documents}
    )
    assert rendered == "[a][b]"


@pytest.mark.parametrize("name", ["add_generation_prompt", "messages", "tools"])
def test_kwargs_cannot_set_what_the_call_sets(name: str) -> None:
    # The template was blamed: "failed: TypeError: got multiple values for keyword ...".
    with pytest.raises(ChatTemplateError, match=f"chat_template_kwargs cannot set '{name}'"):
        load_chat_template("{{ x }}").render(
            [{"role": "user", "content": "x"}], variables={name: 1}
        )


@pytest.mark.parametrize("messages", [{"role": "user", "content": "x"}, "hello"])
def test_messages_that_are_not_a_list_are_refused_as_on_the_openai_route(messages: Any) -> None:
    # A mapping was read as its keys: "message 0 is a str, not a mapping".
    with pytest.raises(ChatTemplateError, match=r"messages is a list of mappings, got (dict|str)"):
        load_chat_template("{{ messages }}").render(messages)


def test_no_messages_is_refused() -> None:
    with pytest.raises(ChatTemplateError, match="at least one message"):
        load_chat_template("{{ messages }}").render([])


def test_a_chat_template_jinja_beside_the_config_wins(tmp_path: Path) -> None:
    directory = tokenizer_directory(tmp_path, "OLD {{ messages[0].content }}", bos_as_object=False)
    (directory / "chat_template.jinja").write_text("NEW {{ messages[0].content }}")
    messages = [{"role": "user", "content": "hi"}]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert load_chat_template(directory).render(messages) == expected == "NEW hi"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("tokenizer_config.json", b'{"chat_template": "{{ messages }}",}'),  # not JSON
        ("latin1.jinja", b"\xab{{ messages }}"),  # not UTF-8
        ("tokenizer_config.json", b'{"chat_template": [{"template": "x"}]}'),  # no name
        ("tokenizer_config.json", b'["a list"]'),  # not an object
    ],
)
def test_a_template_file_that_cannot_be_read_is_a_chat_template_error(
    tmp_path: Path, name: str, content: bytes
) -> None:
    # JSONDecodeError, UnicodeDecodeError, KeyError or AttributeError escaped before.
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ChatTemplateError, match="cannot read a chat template from"):
        load_chat_template(tmp_path / name)
