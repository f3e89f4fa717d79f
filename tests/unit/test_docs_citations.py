"""Every citation of the project's references resolves: ``docs/methods.md §2.10`` or ``docs/design.md §6``
in the code, configs, benchmarks and tests must name a section that has a heading in that file, and
nothing may cite the old out-of-repository ``METHODS.md`` / ``DESIGN.md`` (a clone cannot follow them)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["src", "configs", "benchmarks", "tests", "docs/findings.md"]
DOCS = {"methods": ROOT / "docs" / "methods.md", "design": ROOT / "docs" / "design.md"}

# "docs/methods.md §2.3", "docs/methods.md (§2.1–2.30)"; a line break, "#" or a string break before the "§".
CITATION = re.compile(r"docs/(methods|design)\.md\)?[\s#*\"']*\(?§\s?(\d+(?:\.\d+)*)(?:\s?[–-]\s?(\d+\.\d+))?")
# The old documents by name: "METHODS.md", "METHODS §2.2", "METHODS test 2", "METHODS' default", "(METHODS: …".
BARE = re.compile(r"\b(?:METHODS|DESIGN)(?:\.md\b|\s+§|\s+tests?\b|'|:)")
WORD = re.compile(r"\b(?:METHODS|DESIGN)\b")  # in src/ and configs/ no identifier has these names
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\b", re.MULTILINE)


def sections(doc: str) -> set[str]:
    return set(HEADING.findall(DOCS[doc].read_text()))


def scanned_files():
    for entry in SCANNED:
        path = ROOT / entry
        for f in ([path] if path.is_file() else sorted(path.rglob("*"))):
            if f.is_file() and f.suffix in {".py", ".yaml", ".yml", ".md", ".txt", ".toml"} and f.name != Path(__file__).name:
                yield f


def unresolved(text: str, known: dict[str, set[str]]) -> list[str]:
    bad = []
    for m in CITATION.finditer(text):
        doc, first, last = m.group(1), m.group(2), m.group(3)
        for number in filter(None, (first, last)):
            if number not in known[doc]:
                bad.append(f"docs/{doc}.md §{number}")
    return bad


def test_every_citation_names_a_heading():
    known = {doc: sections(doc) for doc in DOCS}
    problems, count = [], 0
    for f in scanned_files():
        text = f.read_text(errors="replace")
        count += len(CITATION.findall(text))
        problems += [f"{f.relative_to(ROOT)}: {c} has no heading" for c in unresolved(text, known)]
        strict = f.relative_to(ROOT).parts[0] in {"src", "configs"}
        for m in (WORD if strict else BARE).finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{f.relative_to(ROOT)}:{line}: cites '{m.group(0)}', which is not in the repository; "
                            "cite docs/methods.md or docs/design.md")
    assert count > 150, f"only {count} citations found: is the pattern still right?"
    assert not problems, "\n".join(problems)


def test_docs_keep_the_cited_numbering():
    methods = sections("methods")
    expected = {"0.1", "0.2", "0.3"} | {f"1.{i}" for i in range(1, 10)} | {f"2.{i}" for i in range(1, 31)}
    assert expected <= methods, sorted(expected - methods)
    assert {str(i) for i in range(1, 11)} <= sections("design")


def test_checker_catches_a_bad_citation():
    known = {"methods": {"2.1", "2.30"}, "design": {"6"}}
    assert unresolved("see docs/methods.md §2.1 and docs/design.md §6", known) == []
    assert unresolved("see docs/methods.md (§2.1–2.31)", known) == ["docs/methods.md §2.31"]
    assert unresolved("docs/design.md\n    # §7 here", known) == ["docs/design.md §7"]
    assert BARE.search("as METHODS.md says") and BARE.search("METHODS §2.2") and not BARE.search("METHODS = [")
    assert BARE.search("# METHODS test 2") and BARE.search("METHODS' default") and WORD.search("(METHODS)")
    assert unresolved('(required, docs/methods.md "\n    "§2.40)', {"methods": set()}) == ["docs/methods.md §2.40"]
