"""The emulated cluster's commands (docs/multihost.md, which README's "Several hosts" points to)
are ones the tools accept: every `cluster/multihost.sh`
subcommand it shows is one the script dispatches (and every one the script has is shown), every
`link` form it shows is one `link` takes, the `distgnn launch` lines parse with the real parser,
and the Snakemake line carries the flags the Slurm tests pass. Needs no native build or cluster.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands_section() -> str:
    """docs/multihost.md's "The commands" section."""
    return (ROOT / "docs" / "multihost.md").read_text().split("## The commands", 1)[1].split("\n## ", 1)[0]


def several_hosts_commands() -> list[list[str]]:
    """The shell commands of the section's code block, continuation lines joined, comments cut."""
    section = commands_section()
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def script_dispatch() -> set[str]:
    script = (ROOT / "cluster" / "multihost.sh").read_text()
    dispatch = script.rsplit('case "${1:-}" in', 1)[-1] if 'case "${1:-}" in' in script else script
    return set(re.findall(r"^  ([a-z]+)\)", dispatch, flags=re.M))


def link_forms() -> set[str]:
    script = (ROOT / "cluster" / "multihost.sh").read_text()
    body = script.split("\nlink() {", 1)[1].split("\n}", 1)[0]
    return set(re.findall(r"^\s+([a-z]+)\)", body, flags=re.M))


def test_the_section_shows_every_subcommand_and_only_real_ones() -> None:
    commands = several_hosts_commands()
    shown = {c[2] for c in commands if c[:2] == ["bash", "cluster/multihost.sh"]}
    section = commands_section()
    named_in_comments = set(re.findall(r"`(status|revive|env)\b", section))
    dispatch = script_dispatch()
    assert dispatch >= {"start", "stop", "status", "link", "lose", "revive", "exec"}
    assert shown <= dispatch, f"docs/multihost.md shows subcommands the script lacks: {shown - dispatch}"
    assert dispatch - {"env"} <= shown | named_in_comments, \
        f"docs/multihost.md never names: {dispatch - {'env'} - shown - named_in_comments}"


def test_link_lines_use_forms_the_script_takes_on_its_hosts() -> None:
    forms = link_forms()
    links = [c for c in several_hosts_commands() if c[:3] == ["bash", "cluster/multihost.sh", "link"]]
    assert links
    for c in links:
        assert re.fullmatch(r"mh[0-9]+", c[3]), c
        assert c[4] in forms, f"`link {c[4]}` is not a form of the script's link ({sorted(forms)})"


def test_launch_lines_parse_and_the_resume_line_resumes() -> None:
    from distgnn.cli import build_parser

    parser = build_parser()
    launches = [c for c in several_hosts_commands() if c[2:5] == ["exec", "mhctl", "distgnn"]
                and c[5] == "launch"]
    assert len(launches) >= 2
    parsed = [parser.parse_args(c[5:]) for c in launches]
    assert all(a.executor == "slurm" and a.preset == "multihost" for a in parsed)
    assert any(a.resume for a in parsed) and any(not a.resume for a in parsed)


def test_the_snakemake_line_has_the_flags_the_slurm_tests_pass() -> None:
    from test_workflow import SLURM_TEST_OPTIONS

    snakemake = [c for c in several_hosts_commands() if "snakemake" in c]
    assert len(snakemake) == 1
    line = snakemake[0]
    assert line[line.index("--profile") + 1] == "cluster/multihost"
    assert (ROOT / "cluster" / "multihost" / "config.yaml").is_file()
    for flag, value in zip(SLURM_TEST_OPTIONS[::2], SLURM_TEST_OPTIONS[1::2]):
        assert line[line.index(flag) + 1] == value
