"""``dedup run --master`` picks the Spark master over the pipeline file's ``run.master``."""

from __future__ import annotations

from dedup.cli.main import build_parser


def test_master_flag_is_parsed_and_optional() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "p.toml", "--master", "spark://127.0.0.1:7077"])
    assert args.master == "spark://127.0.0.1:7077"
    assert parser.parse_args(["run", "p.toml"]).master is None
