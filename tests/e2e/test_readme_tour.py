"""The README's tour runs as written: its shell blocks, in order, with bash, against a fresh
local stack, and every curl command answers the status its comment says."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from chalicelib.local.launcher import StackProcess
from chalicelib.local.stack import ROOT

TOUR = re.compile(r"<!-- tour:begin -->(.*?)<!-- tour:end -->", re.S)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
EXPECTED = re.compile(r"^# (\d{3})\b")
# Every curl of the tour goes through this: it records the status of each call with the script
# line it was called from, and leaves the output alone (a pipe or a $(...) reads it unchanged).
PRELUDE = """\
curl() {
  local headers rc
  headers=$(mktemp)
  command curl -D "$headers" "$@"; rc=$?
  echo "${BASH_LINENO[0]} $(awk 'toupper($1) ~ /^HTTP\\// {code=$2} END {print code}' "$headers")" >> "$TOUR_STATUSES"
  rm -f "$headers"
  return $rc
}
set -e
"""


@dataclass(frozen=True)
class Command:
    line: int  # 1-based, in the script
    text: str
    expected: int | None


def tour_script(readme: str) -> str:
    [tour] = TOUR.findall(readme)
    blocks = SH_BLOCK.findall(tour)
    assert blocks, "the tour has no ```sh blocks between its markers"
    return PRELUDE + "".join(blocks)


def curl_commands(script: str) -> list[Command]:
    """Each command that starts a line with curl, with the status the comment line after it gives."""
    lines = script.splitlines()
    commands, index = [], 0
    while index < len(lines):
        if not lines[index].startswith("curl "):
            index += 1
            continue
        first, text = index, lines[index]
        while text.rstrip().endswith("\\") or text.count("'") % 2:
            index += 1
            text += "\n" + lines[index]
        following = lines[index + 1] if index + 1 < len(lines) else ""
        match = EXPECTED.match(following)
        commands.append(Command(first + 1, text, int(match.group(1)) if match else None))
        index += 1
    return commands


def test_every_curl_of_the_tour_says_what_it_answers():
    commands = curl_commands(tour_script((ROOT / "README.md").read_text()))
    assert len(commands) >= 20
    assert not [c.text for c in commands if c.expected is None]
    assert {c.expected for c in commands} >= {200, 201, 202, 400, 405, 409, 422}


@pytest.fixture(scope="module")
def fresh_stack(tmp_path_factory):
    stack = StackProcess(tmp_path_factory.mktemp("tour") / "data", api_key="rk_tour-key").start()
    yield stack
    stack.stop()


def test_the_readme_tour_runs_end_to_end_against_a_fresh_stack(fresh_stack, tmp_path):
    # Given the tour's blocks, as a person pastes them after `make run`
    script = tour_script((ROOT / "README.md").read_text())
    statuses_file = tmp_path / "statuses"
    env = {**os.environ, "KEY": fresh_stack.api_key, "API": fresh_stack.url, "TOUR_STATUSES": str(statuses_file),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    # When bash runs them in order
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)

    # Then it ends well, and every curl answered the status its comment says
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    answered: dict[int, list[int]] = {}
    for row in statuses_file.read_text().splitlines():
        line, _, status = row.partition(" ")
        answered.setdefault(int(line), []).append(int(status or 0))
    commands = {c.line: c for c in curl_commands(script)}
    wrong = [(c.expected, answered.get(line), c.text) for line, c in commands.items()
             if answered.get(line) != [c.expected]]
    assert not wrong, wrong
    others = [(line, s) for line, found in answered.items() if line not in commands for s in found]
    assert others and all(200 <= s < 300 for _, s in others), others

    # and the story happened: a run that matched, matches, an exception whose filter finds the fee
    run = fresh_stack.request("GET", "/reconciliations/1/runs/1").json()
    assert run["status"] == "completed" and run["matched_records"] >= 2, run
    matches = fresh_stack.request("GET", "/reconciliation_matches", params={"reconciliation_id": 1}).json()["data"]
    assert len(matches) == 4, matches  # the Stripe payout, the Globex wire, Acme's payment, the statement's wire
    statement = [j for j in fresh_stack.request("GET", "/data_streams/bank/file_imports").json()["data"]
                 if j["source"] == "bai2"]
    assert [(j["status"], j["successful_items"]) for j in statement] == [("completed", 1)], statement
    [day] = fresh_stack.request("GET", "/data_streams/bank/balances").json()["data"]
    assert (day["opening_booked"], day["closing_booked"], day["gap"]) == (171500, 269500, False), day
    fee = fresh_stack.request("GET", "/reconciliation_exceptions/1",
                              params={"direction": "debit", "age_bucket": "gt_90d"}).json()
    assert fee["filtered_aggregates"]["record_count"] == 1, fee


MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_and_docs_link_only_to_files_the_repository_has():
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert (ROOT / "docs" / "README.md") in documents
    broken = [(doc.name, target) for doc in documents for target in MARKDOWN_LINK.findall(doc.read_text())
              if "://" not in target and not (doc.parent / target).resolve().exists()]
    assert not broken, broken


def test_no_file_of_the_repository_points_outside_it_to_a_shared_folder():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    needle = "shared" + "/"  # spelled so that this file does not find itself
    pointing = [path for path in tracked if (ROOT / path).is_file() and (ROOT / path).suffix in
                {".md", ".py", ".txt", ".yaml", ".yml", ".json", ".toml", ""} and needle in
                (ROOT / path).read_text(errors="replace")]
    assert not pointing, pointing
