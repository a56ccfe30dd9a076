"""The results index: rows from run folders, and a lost or corrupt index rebuilt from them."""

import json

from tbdkit.store import INDEX, Index


def make_run(results, run_id, status="ok", throughput=12.5):
    d = results / run_id
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({
        "run_id": run_id, "status": status, "model": "deepspeech2", "framework": "pytorch", "batch_size": 4,
        "precision": "fp32", "preset": "smoke", "device": "cpu",
        "metrics": {"throughput": {"value": throughput, "unit": "audio_s/s", "ci95_relative": 0.01},
                    "cpu_utilization": {"value": 95.0, "unit": "%"},
                    "gpu_utilization": {"value": None, "unit": "%", "reason": "cpu"}},
    }))
    return d


def test_add_list_find(tmp_path):
    index = Index(tmp_path)
    index.add(make_run(tmp_path, "20260101-000000-a"))
    index.add(make_run(tmp_path, "20260101-000001-b", status="oom", throughput=None))
    rows = index.runs()
    assert [r["run_id"] for r in rows] == ["20260101-000000-a", "20260101-000001-b"]
    assert rows[0]["throughput"] == 12.5 and rows[0]["gpu_utilization"] is None
    assert [r["run_id"] for r in index.runs(status="oom")] == ["20260101-000001-b"]
    assert index.find("last").name == "20260101-000001-b"
    assert index.find("-a").name == "20260101-000000-a"
    assert index.find("20260101") is None  # ambiguous


def test_run_without_summary_is_not_indexed(tmp_path):
    (tmp_path / "20260101-000000-running").mkdir()
    assert Index(tmp_path).runs() == []


def test_lost_and_corrupt_index_are_rebuilt(tmp_path):
    for i in range(3):
        make_run(tmp_path, f"20260101-00000{i}-x")
    index = Index(tmp_path)
    assert len(index.runs()) == 3           # never added: rebuilt from the folders
    (tmp_path / INDEX).unlink()
    assert len(index.runs()) == 3           # lost
    (tmp_path / INDEX).write_bytes(b"this is not sqlite" * 100)
    assert len(index.runs()) == 3           # corrupt
    index.add(make_run(tmp_path, "20260101-000009-y"))
    assert len(index.runs()) == 4
