"""The dataset inspector on local files of every format (and malformed ones), a local directory through the real
`datasets` loader, prompt/conversational detection, chat template and prompt-length checks, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.checks.dataset_inspect import apply_mapping, inspect_dataset, value_type
from grpo_dashboard.cli import main as cli_main
from grpo_dashboard.spec.run_spec import RunSpec

ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i), "level": i % 3} for i in range(6)]


def spec_for(data: Path | str, model: Path | str = "tiny-model", **dataset: Any) -> dict[str, Any]:
    """A spec dict over `data` (local files, or `path` when dataset has it)."""
    ds = {"data_files": str(data), **dataset} if "path" not in dataset else dict(dataset)
    return {
        "name": "inspect",
        "model": {"name_or_path": str(model), "build_tiny": str(model) == "tiny-model"},
        "dataset": ds,
        "rewards": [{"name": "constant"}],
    }


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows in the format the suffix names."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        import csv

        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def problems(report: Any, severity: str = "error") -> list[str]:
    return [f"{p.field}: {p.message}" for p in report.problems if p.severity == severity]


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_each_local_format(tmp_path: Path, suffix: str) -> None:
    data = write(tmp_path / f"data{suffix}", ROWS)
    report = inspect_dataset(spec_for(data, prompt_column="question"), n_samples=2)
    assert report.readable and report.ok, report.to_text()
    assert report.columns == ["question", "answer", "level"] and report.num_rows == 6
    assert report.types["question"] == "string"
    assert report.types["level"] == ("string" if suffix == ".csv" else "int")
    assert len(report.samples) == 2 and report.samples[0]["question"] == "What is 0 + 0?"
    assert report.prompt_column == "question" and not report.conversational
    assert report.rendered_prompt == "What is 0 + 0?"
    assert report.prompt_tokens["rows_measured"] == 6 and report.prompt_tokens["approximate"]


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("bad.jsonl", '{"prompt": "a"}\n{"prompt": \n', ["line 2", "not valid JSON"]),
        ("bad.json", '[{"prompt": "a"}, ', ["cannot be read as json"]),
        ("bad.csv", "prompt,answer\nhello,1\nwith, a comma,2\n", ["line 3", "more fields", "Quote"]),
        ("bad.parquet", "this is not parquet", ["cannot be read as parquet"]),
        ("empty.jsonl", "\n\n", ["holds no rows"]),
        ("list.jsonl", '{"prompt": "a"}\n["a", "b"]\n', ["line 2", "is a list, not an object"]),
        ("array.json", '["a", "b"]', ["JSON array must hold one object per row"]),
        ("data.txt", "prompt\nhello\n", ["supported", ".jsonl"]),
    ],
)
def test_malformed_files_give_a_clear_error_without_crashing(
    tmp_path: Path, name: str, content: str, words: list[str]
) -> None:
    (tmp_path / name).write_text(content)
    report = inspect_dataset(spec_for(tmp_path / name))
    assert not report.readable and not report.ok
    [message] = problems(report)
    for w in words:
        assert w in message, message
    assert "dataset.data_files" in message
    assert "error:" in report.to_text()


def test_missing_file(tmp_path: Path) -> None:
    report = inspect_dataset(spec_for(tmp_path / "nope.jsonl"))
    assert not report.readable and "does not exist" in problems(report)[0]


def test_prompt_column_is_detected_and_the_mapping_suggested(tmp_path: Path) -> None:
    data = write(tmp_path / "d.jsonl", ROWS)
    report = inspect_dataset(spec_for(data))  # prompt_column defaults to 'prompt', which is absent
    [message] = problems(report)
    assert "dataset.prompt_column" in message and "KeyError: 'prompt'" in message
    assert "`dataset.prompt_column: question`" in message
    assert report.prompt_candidates[0] == "question" and report.mapping["prompt_column"] == "question"
    fixed = apply_mapping(RunSpec.from_dict(spec_for(data)), report.mapping)
    assert fixed.dataset.prompt_column == "question"
    assert inspect_dataset(fixed).ok


def test_template_and_system_prompt_make_conversational_prompts(tmp_path: Path) -> None:
    data = write(tmp_path / "d.jsonl", ROWS)
    report = inspect_dataset(spec_for(data, prompt_template="Q: {question}\nA:", system_prompt="Be brief."))
    assert report.ok and report.conversational and report.chat_template is True
    assert report.rendered_prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q: What is 0 + 0?\nA:"},
    ]
    bad = inspect_dataset(spec_for(data, prompt_template="{question} {missing}"))
    assert "['missing']" in problems(bad)[0]


def test_conversational_column_detection_and_message_checks(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        {"messages": [{"from": "human", "value": "x"}]},
    ]
    data = write(tmp_path / "chat.jsonl", rows)
    report = inspect_dataset(spec_for(data, prompt_column="messages"))
    assert report.conversational and report.types["messages"] == "list[dict]|messages"
    assert any("end with an assistant message" in m for m in problems(report, "warning"))
    rows[1] = {"messages": [{"role": "human", "content": "x"}]}
    report = inspect_dataset(spec_for(write(tmp_path / "chat2.jsonl", rows), prompt_column="messages"))
    assert any("unknown role(s) ['human']" in m for m in problems(report))


def test_non_text_prompts_and_reserved_columns(tmp_path: Path) -> None:
    data = write(tmp_path / "d.jsonl", [{"prompt": {"a": 1}, "completion": "x"}, {"prompt": "", "completion": "y"}])
    report = inspect_dataset(spec_for(data))
    assert any("holds dict values" in m for m in problems(report))
    warnings = problems(report, "warning")
    assert any("1 of 2 sampled rows have an empty 'prompt'" in m for m in warnings)
    assert any("'completion' column" in m for m in warnings)


def test_missing_chat_template_is_an_error_for_conversational_prompts(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    data = write(tmp_path / "d.jsonl", ROWS)
    report = inspect_dataset(spec_for(data, model, prompt_column="question", conversational=True))
    assert report.chat_template is False
    assert any("has no chat template" in m and "Cannot use chat template" in m for m in problems(report))
    plain = inspect_dataset(spec_for(data, model, prompt_column="question"))
    assert plain.ok


def test_long_prompts_are_counted_with_the_model_tokenizer(tmp_path: Path, tiny_model: Path) -> None:
    rows = [{"prompt": "short"}, {"prompt": "x" * 300}, {"prompt": "y" * 50}]
    data = write(tmp_path / "d.jsonl", rows)
    report = inspect_dataset(spec_for(data, tiny_model), max_prompt_tokens=100)
    tokens = report.prompt_tokens
    assert not tokens["approximate"] and tokens["max"] == 300 and tokens["over"] == 1  # one token per character
    [warning] = problems(report, "warning")
    assert "1 of 3 sampled prompts are longer than 100 tokens (longest 300)" in warning
    assert any("set `dataset.conversational: true`" in m for m in problems(report, "info"))


def test_local_directory_through_the_datasets_loader(tmp_path: Path) -> None:
    folder = tmp_path / "hub_like"
    folder.mkdir()
    write(folder / "train.jsonl", ROWS)
    report = inspect_dataset(spec_for("", path=str(folder), split="train", prompt_column="question"))
    assert report.readable and report.ok, report.to_text()
    assert report.columns == ["question", "answer", "level"] and report.types["level"] == "int64"
    assert len(report.samples) == 5
    missing = inspect_dataset(spec_for("", path="no-such-owner/no-such-dataset-xyz", prompt_column="q"))
    assert not missing.readable and "cannot be loaded" in problems(missing)[0]


def test_value_types() -> None:
    assert value_type([{"role": "user", "content": "x"}]) == "messages"
    assert value_type([1, 2.0]) == "list[float|int]"
    assert value_type(None) == "null" and value_type(True) == "bool"


def test_cli_inspect_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write(tmp_path / "d.jsonl", ROWS)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(spec_for(data, prompt_column="question")))
    assert cli_main(["inspect-dataset", str(good)]) == 0
    assert "columns  question (string)" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec_for(data)))
    assert cli_main(["inspect-dataset", str(bad), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["mapping"]["prompt_column"] == "question"
    (tmp_path / "broken.jsonl").write_text("{oops\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(spec_for(tmp_path / "broken.jsonl")))
    assert cli_main(["inspect-dataset", str(broken)]) == 2
    assert cli_main(["inspect-dataset", str(tmp_path / "nope.yaml")]) == 2
    (tmp_path / "notyaml.yaml").write_text("name: [unclosed")
    assert cli_main(["inspect-dataset", str(tmp_path / "notyaml.yaml")]) == 2
