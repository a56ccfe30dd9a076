"""Real consumers of a run's trace.json and mllog.txt, shared by the tests that read them."""

from __future__ import annotations

from pathlib import Path


def hta_frame(path: Path):
    """trace.json as Holistic Trace Analysis reads it: (its events table, its symbol table)."""
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig

    _, df, symbols = parse_trace_dataframe(str(path), ParserConfig.get_default_cfg())
    names = symbols.get_sym_table()
    df = df.assign(name_text=[names[i] for i in df["name"]], cat_text=[names[i] for i in df["cat"]])
    return df


def parse_mllog(path: Path):
    """mllog.txt as mlperf-logging's compliance checker parses it: {key: {"value", "metadata"}}; no line fails."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    lines, errors = parse_file(str(path), ruleset="5.1.0")
    assert errors == []
    return {line.key: line.value for line in lines}
