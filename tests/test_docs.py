"""The docs say how to use the harness; what was measured, when and at which commit, is in docs/log/.

Outside ``docs/log/``, README.md and ``docs/*.md`` hold no commit of this repository, no load
average and no date of a run, except in each file's one table of current figures: the table
right after a line that starts with ``Current figures``, which names the commit the figures were
measured at and links to the log file that records them (its title names the same commit).
Fenced code blocks are not read (example output holds hex digests). Each log file is
``docs/log/YYYY-MM-DD-subject.md`` and its title starts with that date and names its commit.
No doc, log or not, promises that later commits leave a measurement valid.
"""

from __future__ import annotations

import datetime
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOG = "docs/log"
MARKER = "Current figures"
HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
SHORT = re.compile(r"(?<![0-9A-Za-z_.=,+-])[0-9a-f]{7}(?![0-9A-Za-z_]|[.,]\d)")
DATE = re.compile(r"(?<![0-9])(20\d\d)-(\d\d)-(\d\d)(?![0-9])")
LOAD = re.compile(r"load average", re.I)
LINK = re.compile(r"\]\(([^)#\s]+\.md)")
LOG_PATH = re.compile(r"(?:docs/)?log/[\w.-]+")     # a log file's name holds its date
# The scanner's docs are being rewritten by work under way beside this check; until it lands they
# keep the commits of the scanner they compared and a load average. Drop them from here once
# their measurements are in docs/log/ (test_pending_docs_still_hold_measurements says when).
PENDING: set[str] = set()
# Sentences that said a measurement holds for commits after it; each was false when written.
PROMISES = re.compile(r"documentation only|changed? no code|changes? nothing these runs|"
                      r"later commits (?:change|changed) nothing|not run on a gpu at the commit", re.I)
# The day of the repository's first commit: no run of it is older.
FIRST_DAY = datetime.date(2026, 11, 30)


def history(root: pathlib.Path) -> list[str] | None:
    """Every commit of the repository; None where the history is not all here (a shallow clone,
    as CI checkouts often are, or no git), and any commit-shaped token counts as a commit."""
    def git(*args):
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.split() if done.returncode == 0 else None
    if git("rev-parse", "--is-shallow-repository") != ["false"]:
        return None
    return git("rev-list", "--all")


def commits_in(text: str, commits: list[str] | None) -> list[str]:
    """The tokens of ``text`` that name a commit of ``commits`` (a prefix of one); without the
    history, every token of git's default abbreviation, 7 hex digits, that is not part of a
    number (``1.3165538e-36``, ``=43e00000``)."""
    if commits is None:
        return SHORT.findall(text)
    return [t for t in HEX.findall(text) if any(c.startswith(t) for c in commits)]


def run_dates(text: str, since: datetime.date) -> list[str]:
    found = []
    for m in DATE.finditer(text):
        try:
            day = datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            continue
        if day >= since:
            found.append(m.group(0))
    return found


def prose_lines(text: str):
    """(line number, line, whether it is part of the current-figures block), code blocks left out.

    The block is the marker line, the blank lines after it and the table that follows them."""
    fenced, block, table = False, False, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith(MARKER):
            block, table = True, False
            yield number, line, True
            continue
        if block:
            if line.startswith("|"):
                table = True
                yield number, line, True
                continue
            if not line.strip() and not table:
                continue
            block = False
        yield number, line, False


def problems_in(path: pathlib.Path, root: pathlib.Path, commits: list[str], since: datetime.date) -> list[str]:
    name = path.relative_to(root).as_posix()
    text = path.read_text()
    out = []
    markers = [line for line in text.splitlines() if line.startswith(MARKER)]
    if len(markers) > 1:
        out.append(f"{name}: {len(markers)} current-figures tables (one at most)")
    for marker in markers:
        out += marker_problems(name, path, marker, root, commits)
    for number, line, current in prose_lines(text):
        if current:
            continue
        line = LOG_PATH.sub("", line)
        for what, hits in (("commit", commits_in(line, commits)), ("date of a run", run_dates(line, since)),
                           ("load average", LOAD.findall(line))):
            if hits:
                out.append(f"{name}:{number}: {what} {hits[0]!r} outside the current-figures table (move it to {LOG}/)")
    return out


def marker_problems(name: str, path: pathlib.Path, marker: str, root: pathlib.Path, commits: list[str]) -> list[str]:
    named = commits_in(marker, commits)
    if len(named) != 1:
        return [f"{name}: the current-figures line must name one commit of this repository, names {named}"]
    logs = [link for link in LINK.findall(marker) if f"{LOG}/" in (path.parent / link).resolve().as_posix()
            .replace(root.resolve().as_posix() + "/", "")]
    if not logs:
        return [f"{name}: the current-figures line must link to its record in {LOG}/"]
    target = (path.parent / logs[0]).resolve()
    if not target.is_file():
        return [f"{name}: the current-figures line links to {logs[0]}, which does not exist"]
    title = target.read_text().splitlines()[0]
    if not any(named[0].startswith(c) or c.startswith(named[0]) for c in commits_in(title, commits)):
        return [f"{name}: the current figures are of {named[0]}, but {target.name}'s title names no such commit"]
    return []


def log_problems(path: pathlib.Path, commits: list[str]) -> list[str]:
    name = path.name
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)-[a-z0-9-]+\.md", name)
    if not m:
        return [f"{LOG}/{name}: name it YYYY-MM-DD-subject.md"]
    title = path.read_text().splitlines()[0]
    if not title.startswith(f"# {m.group(1)}"):
        return [f"{LOG}/{name}: the title must start with its date, {m.group(1)}"]
    if not commits_in(title, commits):
        return [f"{LOG}/{name}: the title must name the commit the runs were made on"]
    return []


def all_problems(root: pathlib.Path, pending=frozenset()) -> list[str]:
    commits, since = history(root), FIRST_DAY
    user_docs = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    out = []
    for path in user_docs:
        if path.relative_to(root).as_posix() not in pending:
            out += problems_in(path, root, commits, since)
    logs = sorted((root / LOG).glob("*.md"))
    for path in logs:
        out += log_problems(path, commits)
    for path in user_docs + logs:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PROMISES.search(line):
                out.append(f"{path.relative_to(root).as_posix()}:{number}: promises that later commits leave a "
                           f"measurement valid: {PROMISES.search(line).group(0)!r}")
    return out


def test_measurements_live_in_the_log_pinned_to_their_commit():
    problems = all_problems(ROOT, PENDING)
    assert not problems, "\n".join(problems)


def test_pending_docs_still_hold_measurements():
    commits, since = history(ROOT), FIRST_DAY
    done = [name for name in sorted(PENDING) if not problems_in(ROOT / name, ROOT, commits, since)]
    assert not done, f"{done} hold no measurement any more: drop them from PENDING"


def test_the_readme_maps_every_doc():
    readme = (ROOT / "README.md").read_text()
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    missing = [d for d in docs + [f"{LOG}/"] if f"]({d}" not in readme]
    assert not missing, f"README.md's docs map does not link {missing}"


# --- the check itself, on a repository made to break it ---------------------------------------

def _repo(tmp_path: pathlib.Path) -> tuple[pathlib.Path, str]:
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True, env={"GIT_AUTHOR_DATE": "2026-11-30T00:00:00", "PATH": "/usr/bin:/bin",
                                                    "GIT_COMMITTER_DATE": "2026-11-30T00:00:00", "HOME": str(tmp_path),
                                                    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                                    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout
    git("init", "-q")
    (tmp_path / "docs" / "log").mkdir(parents=True)
    (tmp_path / "README.md").write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "first")
    return tmp_path, git("rev-parse", "HEAD").strip()


def test_the_check_finds_hashes_load_dates_and_promises_outside_the_table(tmp_path):
    root, head = _repo(tmp_path)
    short = head[:7]
    (root / "docs" / "log" / "2026-12-04-bench.md").write_text(f"# 2026-12-04, commit {short}: the bench\n")
    (root / "docs" / "bench.md").write_text(
        f"How to run it.\n\n"
        f"Current figures, measured at commit {short} ([log](log/2026-12-04-bench.md)):\n\n"
        f"| figure | value |\n|---|---|\n| overhead (load average 2, 2026-12-04) | 1.9 x |\n\n"
        f"Measured at {short} under load average 3 on 2026-12-05; the commits after it change documentation only.\n"
        f"```\nshape digest {short}, 2026-12-05\n```\n"
        f"A digest {'f' * 12} that is no commit, and a date before the project, 2024-11-18.\n")
    problems = all_problems(root)
    assert problems == [
        f"docs/bench.md:9: commit '{short}' outside the current-figures table (move it to docs/log/)",
        "docs/bench.md:9: date of a run '2026-12-05' outside the current-figures table (move it to docs/log/)",
        "docs/bench.md:9: load average 'load average' outside the current-figures table (move it to docs/log/)",
        "docs/bench.md:9: promises that later commits leave a measurement valid: 'documentation only'",
    ], problems


def test_the_check_wants_one_pinned_table_and_pinned_log_files(tmp_path):
    root, head = _repo(tmp_path)
    short = head[:7]
    (root / "docs" / "log" / "2026-12-04-bench.md").write_text("# 2026-12-04: the bench, no commit\n")
    (root / "docs" / "log" / "bench-notes.md").write_text(f"# commit {short}\n")
    (root / "docs" / "a.md").write_text(f"Current figures, measured at commit {short} ([log](log/2026-12-04-bench.md)):\n"
                                        "| x |\n\nCurrent figures, unpinned:\n| y |\n")
    (root / "docs" / "b.md").write_text(f"Current figures at commit {short}, linked nowhere:\n| x |\n")
    problems = all_problems(root)
    assert "docs/a.md: 2 current-figures tables (one at most)" in problems
    assert (f"docs/a.md: the current figures are of {short}, but 2026-12-04-bench.md's title names no such commit"
            in problems)
    assert "docs/a.md: the current-figures line must name one commit of this repository, names []" in problems
    assert "docs/b.md: the current-figures line must link to its record in docs/log/" in problems
    assert "docs/log/2026-12-04-bench.md: the title must name the commit the runs were made on" in problems
    assert "docs/log/bench-notes.md: name it YYYY-MM-DD-subject.md" in problems


def test_without_the_history_a_short_hash_still_counts_and_numbers_do_not():
    text = ("measured at 5631157 and c3d1cd8; float32 1.3165538e-36, bits =43e00000, seed 20261204, "
            "another project's d98e8a64dd, 1,234567.5")
    assert commits_in(text, None) == ["5631157", "c3d1cd8"]
    assert commits_in(text, ["c3d1cd8" + "0" * 33]) == ["c3d1cd8"]
