"""Finding the code action in a model reply (codeact.parsing.parse_reply)."""

from __future__ import annotations

import pytest

from codeact.parsing import parse_reply


@pytest.mark.parametrize("lang", ["python", "py", "Python", "python3", "ipython"])
def test_python_fences_are_code(lang: str) -> None:
    reply = f"I will add the numbers.\n```{lang}\nx = 1 + 2\nprint(x)\n```\nThat should work."
    parsed = parse_reply(reply)
    assert parsed.has_code
    assert parsed.code == "x = 1 + 2\nprint(x)"
    assert parsed.other_blocks == ()


def test_prose_is_extracted_without_the_code() -> None:
    parsed = parse_reply("Thought: load it first.\n```python\nimport json\n```\nThen look at it.")
    assert "Thought: load it first." in parsed.prose
    assert "Then look at it." in parsed.prose
    assert "import json" not in parsed.prose
    assert "```" not in parsed.prose


def test_fence_with_info_string_after_language() -> None:
    parsed = parse_reply('```python title="step.py"\nprint("hi")\n```')
    assert parsed.code == 'print("hi")'


def test_bare_fence_that_parses_is_code() -> None:
    parsed = parse_reply("Let me check:\n```\nfor i in range(3):\n    print(i)\n```")
    assert parsed.code == "for i in range(3):\n    print(i)"
    assert parsed.other_blocks == ()


def test_bare_fence_that_does_not_parse_is_not_code() -> None:
    parsed = parse_reply("The table:\n```\n| city | temp |\n|------|------|\n| 北京 | 22 |\n```")
    assert not parsed.has_code
    assert parsed.code is None
    assert parsed.other_blocks == ("text",)


@pytest.mark.parametrize("lang", ["bash", "sh", "json", "sql"])
def test_other_language_fences_are_not_run_and_are_reported(lang: str) -> None:
    parsed = parse_reply(f"Run this:\n```{lang}\nls -la\n```")
    assert not parsed.has_code
    assert parsed.other_blocks == (lang,)


def test_other_language_next_to_python_only_python_runs() -> None:
    reply = "```bash\npip install pandas\n```\nand then\n```python\nimport pandas\n```\n```json\n{\"a\": 1}\n```"
    parsed = parse_reply(reply)
    assert parsed.code == "import pandas"
    assert parsed.other_blocks == ("bash", "json")


def test_several_python_blocks_are_joined_in_order() -> None:
    reply = "First:\n```python\na = 1\n```\nSecond:\n```py\nb = a + 1\n```\nThird:\n```\nprint(a, b)\n```"
    parsed = parse_reply(reply)
    assert parsed.code is not None
    assert parsed.code.index("a = 1") < parsed.code.index("b = a + 1") < parsed.code.index("print(a, b)")
    ns: dict = {}
    exec(compile(parsed.code, "<reply>", "exec"), ns)  # the joined code is itself valid Python
    assert ns["b"] == 2


def test_unclosed_last_fence_counts_as_closed() -> None:
    parsed = parse_reply("Computing:\n```python\ntotal = sum(range(10))\nprint(total)")
    assert parsed.code == "total = sum(range(10))\nprint(total)"


def test_unclosed_fence_after_a_closed_one() -> None:
    parsed = parse_reply("```python\na = 1\n```\nnow\n```python\nprint(a)\n")
    assert parsed.code == "a = 1\n\nprint(a)"


def test_execute_tags() -> None:
    parsed = parse_reply("I'll compute it.\n<execute>\nprint(6 * 7)\n</execute>\nDone soon.")
    assert parsed.code == "print(6 * 7)"
    assert "I'll compute it." in parsed.prose
    assert "<execute>" not in parsed.prose
    assert "Done soon." in parsed.prose


def test_execute_tags_case_and_several() -> None:
    parsed = parse_reply("<EXECUTE>x = 2</EXECUTE> and <execute>print(x)</execute>")
    assert parsed.code == "x = 2\n\nprint(x)"


def test_unclosed_execute_tag() -> None:
    parsed = parse_reply("<execute>\nimport math\nprint(math.pi)")
    assert parsed.code == "import math\nprint(math.pi)"


def test_python_fence_wins_over_execute_tag() -> None:
    parsed = parse_reply("```python\nprint('fence')\n```\n<execute>print('tag')</execute>")
    assert parsed.code == "print('fence')"


def test_indented_fence_is_dedented() -> None:
    reply = "Steps:\n1. Load the file:\n    ```python\n    import csv\n    if True:\n        print('ok')\n    ```\n"
    parsed = parse_reply(reply)
    assert parsed.code == "import csv\nif True:\n    print('ok')"
    compile(parsed.code, "<reply>", "exec")


def test_tilde_fences() -> None:
    parsed = parse_reply("~~~python\nprint('tilde')\n~~~\nafter")
    assert parsed.code == "print('tilde')"
    assert parsed.prose == "after"


def test_longer_fence_can_contain_shorter_fences() -> None:
    reply = '````python\ndoc = """\n```\nnot a fence end\n```\n"""\nprint(doc)\n````'
    parsed = parse_reply(reply)
    assert parsed.code is not None
    assert "not a fence end" in parsed.code
    assert parsed.code.endswith("print(doc)")
    compile(parsed.code, "<reply>", "exec")


def test_python_code_that_writes_markdown_with_fences() -> None:
    # The code's own string holds a fence line; the block must not end there.
    reply = (
        "Writing the report.\n```python\n"
        'report = """# Report\n```\nx = 1\n```\n"""\n'
        "open('r.md', 'w').write(report)\nprint(len(report))\n```\nDone."
    )
    parsed = parse_reply(reply)
    assert parsed.code is not None
    compile(parsed.code, "<reply>", "exec")
    assert parsed.code.endswith("print(len(report))")
    assert parsed.prose.endswith("Done.")


def test_python_fence_with_syntax_error_is_still_code() -> None:
    # The model meant code; running it gives the model a SyntaxError to fix.
    parsed = parse_reply("```python\nprint('unclosed\n```")
    assert parsed.has_code
    assert parsed.code == "print('unclosed"


@pytest.mark.parametrize("reply", ["", "   \n\t", None])
def test_empty_reply(reply: str | None) -> None:
    parsed = parse_reply(reply)  # type: ignore[arg-type]
    assert not parsed.has_code
    assert parsed.code is None
    assert parsed.prose == ""
    assert parsed.other_blocks == ()


def test_plain_text_reply_has_no_code() -> None:
    parsed = parse_reply("明天北京晴, 22°C, 适合跑步。")
    assert not parsed.has_code
    assert parsed.prose == "明天北京晴, 22°C, 适合跑步。"
    assert parsed.other_blocks == ()


def test_empty_python_fence_is_not_code() -> None:
    parsed = parse_reply("```python\n```\nNothing to run.")
    assert not parsed.has_code


def test_inline_backticks_are_not_fences() -> None:
    parsed = parse_reply("Call ```final_answer``` when done, or use `print`.")
    assert not parsed.has_code
