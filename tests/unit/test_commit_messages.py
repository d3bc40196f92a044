"""The CI check of commit messages (.ci/commit-messages) on a repository made for the test."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "commit-messages"


def _repository(tmp_path: Path, messages: list[str]) -> Path:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                       cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    for number, message in enumerate(messages):
        (tmp_path / "file").write_text(str(number))
        git("add", "file")
        git("commit", "-q", "-m", message)
    return tmp_path


def _check(repository: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "HEAD~2..HEAD"], cwd=repository,
                          capture_output=True, text=True)


def test_short_subjects_with_a_reason_in_the_body_pass(tmp_path: Path) -> None:
    repository = _repository(tmp_path, ["First", "Add a thing\n\nBecause it was missing.",
                                         "Fix the thing\n\nIt broke on empty input."])

    done = _check(repository)

    assert done.returncode == 0, done.stdout
    assert "2 checked, 0 problem(s)" in done.stdout


def test_a_long_subject_and_a_missing_body_are_named(tmp_path: Path) -> None:
    repository = _repository(tmp_path, ["First", "x" * 73 + "\n\nWhy.", "No reason given"])

    done = _check(repository)

    assert done.returncode == 1
    assert "73 characters (at most 72)" in done.stdout
    assert "'No reason given': no body after a blank line saying why" in done.stdout
