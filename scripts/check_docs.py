#!/usr/bin/env python3
"""Checks that the docs name only what exists, so they cannot drift from the code unnoticed.

    python3 scripts/check_docs.py [--tern BIN] [--root DIR] [FILE...]

FILEs default to README.md, docs/*.md, examples/README.md, bench/README.md and the crate docs (the `//!`
comments of every crates/*/src/lib.rs and main.rs). The binary defaults to $TERN_BIN, else
target/debug/tern under the root. Checked, in the files' code (```sh blocks and `inline code`):

- every `tern <subcommand>...` command: each subcommand exists and each flag it is given (long, short, and
  memcached's clustered short flags of `tern cache`, e.g. -vv) is in `tern <subcommand...> --help`; a flag in
  a comment of a ```sh block is one of a tern command of that block;
- configuration keys: every ```toml block (a campaigns file when it has `currency` or `[[campaign]]`, else the
  runtime's `--config` file) uses only keys the code reads (the serde structs' fields, extracted from
  crates/tern-runtime/src/config.rs, crates/tern-executor/src/config.rs and
  crates/tern-pacer-core/src/campaigns.rs), and docs/architecture.md has a runtime TOML block naming every
  runtime key; an inline `key = value` or `[executor] key` uses a known key; and every inline snake_case
  identifier (`idle_timeout`, `max_in_flight`) occurs somewhere in the code, so a renamed key, field or
  function named by the docs is caught;
- repository paths: every `crates/...`, `bench/...`, `scripts/...`, `docs/...`, `examples/...`, `idl/...`,
  `models/...` path (globs allowed) and every relative Markdown link exists, and a section named as
  `docs/x.md, "Section"` is a heading of that file.

Prints one line per problem (`file:line: what`) and exits 1 if there is any. Standard library only.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

TOP_DIRS = ("crates", "bench", "scripts", "docs", "examples", "idl", "models", ".ci")
# Paths relative to a crate (`src/fixtures.rs`, `tests/unordered.rs`): one crate must have it.
CRATE_DIRS = ("src", "tests", "benches", "fuzz")
# Unit suffixes a renamed key gains or loses (`idle_timeout_ms` for `idle_timeout`).
UNITS = ("ms", "us", "ns", "s", "secs", "micros", "millis", "bytes", "kb", "kib", "mib", "ppm", "milli", "pct")


@dataclass
class Block:
    """A piece of a doc's code: a fenced block (its language) or an inline code span (lang None)."""

    lang: str | None
    text: str
    line: int


@dataclass
class Doc:
    path: Path
    name: str
    text: str
    # Line of the doc where each line of `text` is (crate docs: the source file's line).
    lines: list[int] = field(default_factory=list)

    def line_of(self, offset: int) -> int:
        return self.lines[self.text.count("\n", 0, offset)]


def read_doc(path: Path, root: Path) -> Doc:
    raw = path.read_text(encoding="utf-8")
    name = os.path.relpath(path, root)
    if path.suffix == ".rs":
        kept, lines = [], []
        for number, line in enumerate(raw.split("\n"), 1):
            stripped = line.lstrip()
            if stripped.startswith("//!"):
                body = stripped[3:]
                kept.append(body[1:] if body.startswith(" ") else body)
                lines.append(number)
        return Doc(path, name, "\n".join(kept), lines or [1])
    return Doc(path, name, raw, list(range(1, raw.count("\n") + 2)))


def code_of(doc: Doc) -> list[Block]:
    """The fenced blocks and the inline code spans (outside fences) of a Markdown text."""
    blocks: list[Block] = []
    lines = doc.text.split("\n")
    i = 0
    prose: list[tuple[int, str]] = []
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)", lines[i])
        if m:
            lang, start, body = m.group(1), i, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```", lines[i]):
                body.append(lines[i])
                i += 1
            blocks.append(Block(lang, "\n".join(body), doc.lines[start + 1] if start + 1 < len(doc.lines) else 1))
            i += 1
            continue
        prose.append((i, lines[i]))
        i += 1
    # Inline spans may wrap over a line end: scan the prose paragraph by paragraph.
    para: list[tuple[int, str]] = []
    for item in prose + [(len(lines), "")]:
        if item[1].strip():
            para.append(item)
            continue
        if para:
            joined = "\n".join(text for _, text in para)
            for m in re.finditer(r"(`+)(.+?)\1", joined, re.S):
                first = para[0][0] + joined.count("\n", 0, m.start())
                blocks.append(Block(None, m.group(2), doc.lines[min(first, len(doc.lines) - 1)]))
        para = []
    return blocks


# ---------------------------------------------------------------------------------------------------------
# Flags


class Cli:
    """`tern`'s subcommands and flags, from its --help output."""

    def __init__(self, binary: str):
        self.binary = binary
        self.cache: dict[tuple[str, ...], tuple[set[str], set[str]]] = {}

    def node(self, path: tuple[str, ...]) -> tuple[set[str], set[str]]:
        """(subcommands, flags) of `tern <path>`."""
        if path not in self.cache:
            out = subprocess.run(
                [self.binary, *path, "--help"], capture_output=True, text=True, timeout=30
            )
            if out.returncode != 0:
                raise RuntimeError(f"{self.binary} {' '.join(path)} --help failed: {out.stderr.strip()}")
            subs: set[str] = set()
            flags: set[str] = set()
            section = None
            for line in out.stdout.split("\n"):
                if re.match(r"^\S.*:$", line):
                    section = line[:-1]
                    continue
                if section == "Commands":
                    m = re.match(r"^  (\S+)", line)
                    if m and m.group(1) != "help":
                        subs.add(m.group(1))
                elif re.match(r"^\s+-", line):
                    spec = line.strip().split("  ")[0]
                    flags.update(re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", spec))
            self.cache[path] = (subs, flags)
        return self.cache[path]


# The end of a command in a shell line: a pipe, a list or background operator, a redirection, a comment, the
# end of a command substitution or of a quoted command.
COMMAND_END = re.compile(r"\s(?:\|\|?|&&?|;|[0-9]?>>?|<|#)|[`)]|;")


@dataclass
class Command:
    path: tuple[str, ...]
    flags: list[str]
    line: int


def tern_commands(text: str, line: int, cli: Cli, strict: bool, problems: list, where: str) -> list[Command]:
    """Every `tern ...` command in a piece of shell (or an inline code span)."""
    commands = []
    # `cargo run ... -p tern ... -- run` is `tern run`.
    text = re.sub(r"cargo run\b[^\n|;&#]*?-p tern\b[^\n|;&#]*? -- ", "tern ", text)
    top_subs, _ = cli.node(())
    for m in re.finditer(r"(?:(?<=^)|(?<=[\s\"'(;&|`=]))(?:[\w./$-]*/)?tern(?=[ \t])", text, re.M):
        start = m.end()
        quote = text[m.start() - 1] if m.start() > 0 and text[m.start() - 1] in "\"'" else None
        rest = text[start:]
        end = rest.find(quote) if quote else -1
        stop = COMMAND_END.search(rest)
        if stop and (end < 0 or stop.start() < end):
            end = stop.start()
        rest = rest if end < 0 else rest[:end]
        tokens = [t.strip("\"'") for t in rest.split()]
        tokens = [t for t in tokens if t != "\\"]
        if not tokens:
            continue
        first_word = next((t for t in tokens if not t.startswith("-")), None)
        if first_word not in top_subs:
            # A path to the binary must be followed by a subcommand; a bare "tern" word in prose need not be.
            if strict and "/" in m.group(0) and first_word and re.fullmatch(r"[a-z][a-z-]*", first_word):
                problems.append(f"{where}:{line}: `tern {first_word}`: no such subcommand")
            continue
        path: list[str] = []
        flags: list[str] = []
        expect_sub = True
        for token in tokens:
            if token == "--":
                break
            if token.startswith("-") and not re.match(r"^-[0-9]", token):
                flags.append(token.split("=", 1)[0])
                continue
            if expect_sub:
                subs, _ = cli.node(tuple(path))
                if token in subs:
                    path.append(token)
                    continue
                if subs and path and re.fullmatch(r"[a-z][a-z-]*", token) and not flags:
                    problems.append(
                        f"{where}:{line}: `tern {' '.join(path)} {token}`: no such subcommand "
                        f"(there are: {', '.join(sorted(subs))})"
                    )
                    break
                expect_sub = False
        if path:
            commands.append(Command(tuple(path), flags, line))
    return commands


def check_flag(cli: Cli, cmd: Command, flag: str) -> str | None:
    """None if `flag` is one `tern <cmd.path>` takes, else why not."""
    _, flags = cli.node(cmd.path)
    if flag in flags:
        return None
    # Clustered short flags (-vv, -AM), as clap and getopt take them.
    if re.fullmatch(r"-[A-Za-z]{2,}", flag) and all(f"-{c}" in flags for c in flag[1:]):
        return None
    # A short flag with its value attached (-m256, -p11311).
    if re.fullmatch(r"-[A-Za-z][^-].*", flag) and flag[:2] in flags and not flag[2:].isalpha():
        return None
    return f"`tern {' '.join(cmd.path)}` has no flag {flag} (tern {' '.join(cmd.path)} --help)"


def check_flags(doc: Doc, blocks: list[Block], cli: Cli, problems: list) -> None:
    for block in blocks:
        if block.lang is not None and block.lang not in ("sh", "bash", "shell", "console", ""):
            continue
        strict = block.lang is not None
        text = block.text
        commands = []
        comment_flags: list[tuple[str, int]] = []
        if strict:
            for i, physical in enumerate(text.split("\n")):
                stripped = physical.lstrip()
                comment = stripped if stripped.startswith("#") else physical.partition(" #")[2]
                comment_flags += [(f, block.line + i) for f in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", comment)]
        # Continued lines are joined, so that a command's flags on its next lines count.
        joined = text.replace("\\\n", " ")
        offset = 0
        for logical in joined.split("\n"):
            line = block.line + text.count("\n", 0, text_offset(text, offset))
            offset += len(logical) + 1
            if not logical.lstrip().startswith("#"):
                commands += tern_commands(logical, line, cli, strict, problems, doc.name)
        for cmd in commands:
            for flag in cmd.flags:
                why = check_flag(cli, cmd, flag)
                if why:
                    problems.append(f"{doc.name}:{cmd.line}: {why}")
        for flag, number in comment_flags:
            if commands and all(check_flag(cli, cmd, flag) for cmd in commands):
                names = sorted({" ".join(c.path) for c in commands})
                problems.append(
                    f"{doc.name}:{number}: a comment names {flag}, which none of this block's commands "
                    f"takes ({', '.join('tern ' + n for n in names)})"
                )


def text_offset(text: str, offset: int) -> int:
    """The offset in `text` of `joined`'s offset (joined has each backslash-newline replaced by a space)."""
    i = j = 0
    while j < offset and i < len(text):
        if text.startswith("\\\n", i):
            i += 2
        else:
            i += 1
        j += 1
    return i


# ---------------------------------------------------------------------------------------------------------
# Configuration keys


def struct_fields(source: str, name: str) -> set[str]:
    """The serde names of a Rust struct's (or enum's variants') fields: `rename = "x"` applied."""
    m = re.search(rf"\b(?:struct|enum) {name}\b[^{{;]*\{{", source)
    if not m:
        raise RuntimeError(f"no struct {name}")
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        i += 1
    body = source[m.end() : i - 1]
    names = set()
    rename = None
    for line in body.split("\n"):
        line = line.strip()
        r = re.search(r'rename\s*=\s*"([^"]+)"', line)
        if line.startswith("#[") and r:
            rename = r.group(1)
            continue
        f = re.match(r"^(?:pub(?:\([^)]*\))? )?([a-z_][a-z0-9_]*)\s*:", line)
        if f:
            names.add(rename or f.group(1))
            rename = None
    return names


@dataclass
class Keys:
    runtime: set[str]
    executor: set[str]
    campaigns_file: set[str]
    campaign: set[str]
    creative: set[str]
    targeting: set[str]
    strategy: set[str]

    def all(self) -> set[str]:
        return set().union(*self.__dict__.values())


def code_keys(root: Path) -> Keys:
    runtime = (root / "crates/tern-runtime/src/config.rs").read_text()
    executor = (root / "crates/tern-executor/src/config.rs").read_text()
    campaigns = (root / "crates/tern-pacer-core/src/campaigns.rs").read_text()
    return Keys(
        runtime=struct_fields(runtime, "RuntimeConfig"),
        executor=struct_fields(executor, "Config"),
        campaigns_file=struct_fields(campaigns, "FileConfig"),
        campaign=struct_fields(campaigns, "CampaignEntry"),
        creative=struct_fields(campaigns, "CreativeEntry"),
        targeting=struct_fields(campaigns, "TargetingEntry"),
        strategy=struct_fields(campaigns, "StrategyEntry") | {"kind"},
    )


def uncomment(text: str) -> str:
    """A TOML block with its commented-out keys (`# idle_timeout = "5m"`: off by default) put back."""
    return re.sub(r"(?m)^#\s*([a-z_][a-z0-9_]*\s*=)", r"\1", text)


def check_toml(doc: Doc, block: Block, keys: Keys, problems: list) -> str | None:
    """Checks one ```toml block's keys, commented-out ones included; answers which file it is ("runtime" or
    "campaigns")."""
    try:
        table = tomllib.loads(uncomment(block.text))
    except tomllib.TOMLDecodeError as e:
        problems.append(f"{doc.name}:{block.line}: a TOML block that does not parse: {e}")
        return None

    def unknown(where: str, found, known: set[str]):
        for key in found:
            if key not in known:
                at = re.search(rf"^[ \t]*{re.escape(key)}[ \t]*=|[{{,][ \t]*{re.escape(key)}[ \t]*=", block.text, re.M)
                line = block.line + (block.text.count("\n", 0, at.start()) if at else 0)
                problems.append(
                    f"{doc.name}:{line}: TOML key `{key}` ({where}) is not one the code reads "
                    f"(known: {', '.join(sorted(known))})"
                )

    if "currency" in table or "campaign" in table:
        unknown("campaigns file", table, keys.campaigns_file)
        for campaign in table.get("campaign", []):
            unknown("[[campaign]]", campaign, keys.campaign)
            if isinstance(campaign.get("strategy"), dict):
                unknown("campaign strategy", campaign["strategy"], keys.strategy)
            if isinstance(campaign.get("targeting"), dict):
                unknown("campaign targeting", campaign["targeting"], keys.targeting)
            for creative in campaign.get("creative", []):
                unknown("[[campaign.creative]]", creative, keys.creative)
        return "campaigns"
    unknown("runtime config", table, keys.runtime)
    if isinstance(table.get("executor"), dict):
        unknown("runtime config [executor]", table["executor"], keys.executor)
    return "runtime"


IDENT = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def code_corpus(root: Path) -> str:
    """Every source, build and script text of the repository, in which a name the docs give must occur."""
    parts = []
    for pattern in ("crates/**/*.rs", "crates/**/*.toml", "crates/**/*.py", "scripts/*", "bench/**/*.py",
                    "bench/**/*.sh", "bench/**/*.cpp", "idl/*", "examples/**/*", "fuzz/**/*.rs", ".ci/*",
                    "Cargo.toml"):
        for path in glob.glob(str(root / pattern), recursive=True):
            p = Path(path)
            # Tests name wrong keys on purpose: only what the code itself reads counts.
            if "tests" in p.relative_to(root).parts or p.name == "tests.rs" or p.name == "check_docs.py":
                continue
            if p.is_file() and p.suffix not in (".md",):
                try:
                    text = p.read_text(encoding="utf-8", errors="replace")
                    if p.suffix == ".rs":
                        # Comments drift like docs: only the code counts.
                        text = re.sub(r"//.*", "", text)
                    parts.append(text)
                except OSError:
                    pass
    return "\n".join(parts)


def check_keys(doc: Doc, blocks: list[Block], keys: Keys, corpus_words: set[str], problems: list) -> None:
    for block in blocks:
        if block.lang == "toml":
            check_toml(doc, block, keys, problems)
            continue
        if block.lang is not None:
            continue
        span = " ".join(block.text.split())
        # `key = value` and `[executor] key`: a configuration key, which must be one of the code's.
        m = re.fullmatch(r"\[(\w+)\]\s+([a-z_][a-z0-9_]*)(?:\s*=.*)?", span)
        if m:
            table, key = m.groups()
            known = {"executor": keys.executor, "campaign": keys.campaign}.get(table)
            if known is None:
                problems.append(f"{doc.name}:{block.line}: `{span}`: no configuration table [{table}]")
            elif key not in known:
                problems.append(f"{doc.name}:{block.line}: `{span}`: [{table}] has no key `{key}`")
            continue
        m = re.fullmatch(r"([a-z_][a-z0-9_]*)\s+=\s+(\"[^\"]*\"|[\w.\[\], \"-]+)", span)
        if m and m.group(1) not in keys.all():
            problems.append(f"{doc.name}:{block.line}: `{span}`: `{m.group(1)}` is not a configuration key")
            continue
        if IDENT.match(span) and span not in keys.all() and span not in corpus_words:
            stem = re.sub(r"_(?:" + "|".join(UNITS) + r")$", "", span)
            near = sorted(k for k in keys.all() if re.sub(r"_(?:" + "|".join(UNITS) + r")$", "", k) == stem)
            if near:
                problems.append(
                    f"{doc.name}:{block.line}: `{span}` is not a configuration key; "
                    f"{', '.join('`' + k + '`' for k in near)} is"
                )
                continue
        if IDENT.match(span) and span not in corpus_words:
            # Named by the docs, absent from the code, while the same name with another unit is there: a
            # key or field renamed under the docs (memcached's or the kernel's names, which tern need not
            # have, are left alone).
            stem = re.sub(r"_(?:" + "|".join(UNITS) + r")$", "", span)
            variants = {stem} | {f"{stem}_{unit}" for unit in UNITS}
            present = sorted(v for v in variants if v != span and v in corpus_words)
            if present:
                problems.append(
                    f"{doc.name}:{block.line}: `{span}` does not occur in the code, but "
                    f"{', '.join('`' + v + '`' for v in present)} does (renamed?)"
                )


# ---------------------------------------------------------------------------------------------------------
# Paths


PATH = re.compile(
    r"(?<![\w/.-])((?:\.\./)*(?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w.*/{}<>,-]*)"
    r"|(?<![\w/.-])(tern-[a-z-]+/(?:src|tests|benches|fuzz)/[\w./*-]*)"
    r"|(?<![\w/.-])((?:" + "|".join(CRATE_DIRS) + r")/[\w./*-]*)"
)


def repo_files(root: Path) -> list[str]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("target", ".git", "__pycache__")]
        rel = os.path.relpath(dirpath, root)
        files += [os.path.normpath(os.path.join(rel, f)) for f in filenames]
    return files


def check_file_names(doc: Doc, blocks: list[Block], files: list[str], problems: list) -> None:
    """A source file named in inline code by its name or a partial path (`pressure.rs`, `io_loop/conn.rs`)
    must be some file of the repository."""
    for block in blocks:
        if block.lang is not None:
            continue
        for m in re.finditer(r"(?<![\w/.-])([\w-]+(?:/[\w-]+)*\.(?:rs|py|sh|thrift))\b", block.text):
            name = m.group(1)
            if name.split("/")[0] in TOP_DIRS + CRATE_DIRS or name.startswith("tern-"):
                continue  # checked as a path
            if not any(f == name or f.endswith("/" + name) for f in files):
                problems.append(f"{doc.name}:{block.line}: `{name}`: no file of that name in the repository")


def check_paths(doc: Doc, root: Path, problems: list) -> None:
    text = doc.text
    base = doc.path.parent
    # Paths may wrap inside a code span ("crates/x/src/\nfile.rs"): join such wraps first.
    for m in PATH.finditer(text):
        if m.group(3):
            relative = m.group(3).rstrip(".,:;)")
            if not glob.glob(str(root / "crates/*" / relative)) and not (doc.path.parent / relative).exists():
                problems.append(
                    f"{doc.name}:{doc.line_of(m.start())}: `{relative}` is in no crate (crates/*/{relative})"
                )
            continue
        path = (m.group(1) or "crates/" + m.group(2)).rstrip(".,:;)")
        if path.startswith("../") or any(c in path for c in "{}<>") or path.endswith("/..."):
            continue
        if "," in path:
            path = path.split(",")[0]
        line = doc.line_of(m.start())
        if doc.path.suffix == ".rs" and not (root / path).exists():
            # A crate doc may name files of its own crate relative to it.
            crate = doc.path.parent
            while crate.name != "src" and crate != root:
                crate = crate.parent
            if (crate.parent / path).exists():
                continue
        if not glob.glob(str(root / path)):
            problems.append(f"{doc.name}:{line}: `{path}` does not exist in the repository")
    # Relative Markdown links.
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1).split("#")[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue
        if not (base / target).exists():
            problems.append(f"{doc.name}:{doc.line_of(m.start())}: link to `{target}`, which does not exist")
    # A section named by title: docs/pacer.md, "Admin JSON".
    for m in re.finditer(r"((?:docs/)?[\w-]+\.md),?\s+\"([^\"]+)\"", text):
        name, section = m.groups()
        target = root / name if (root / name).exists() else base / name
        if not target.exists():
            continue  # reported above when it is a repository path
        headings = [h.strip().lower() for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)]
        wanted = " ".join(section.split()).lower()
        if not any(wanted in h for h in headings):
            problems.append(
                f"{doc.name}:{doc.line_of(m.start())}: {name} has no section \"{section}\""
            )


# ---------------------------------------------------------------------------------------------------------


def default_files(root: Path) -> list[Path]:
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "examples/README.md",
             root / "bench/README.md"]
    for crate in sorted((root / "crates").iterdir()):
        for name in ("src/lib.rs", "src/main.rs"):
            if (crate / name).exists():
                files.append(crate / name)
    return [f for f in files if f.exists()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--tern", default=os.environ.get("TERN_BIN"))
    args = parser.parse_args()
    root = args.root.resolve()
    binary = args.tern or str(root / "target/debug/tern")
    if not os.access(binary, os.X_OK):
        print(f"check_docs: no tern binary at {binary} (build it, or give --tern / TERN_BIN)", file=sys.stderr)
        return 2
    cli = Cli(binary)
    keys = code_keys(root)
    corpus_words = set(re.findall(r"[A-Za-z0-9_]+", code_corpus(root)))
    problems: list[str] = []
    files_in_repo = repo_files(root)
    files = [f.resolve() for f in args.files] or default_files(root)
    for path in files:
        doc = read_doc(path, root)
        blocks = code_of(doc)
        check_flags(doc, blocks, cli, problems)
        check_keys(doc, blocks, keys, corpus_words, problems)
        check_paths(doc, root, problems)
        check_file_names(doc, blocks, files_in_repo, problems)
        if doc.name == "docs/architecture.md":
            runtime = [b for b in blocks if b.lang == "toml" and "currency" not in b.text]
            documented = set()
            for block in runtime:
                try:
                    table = tomllib.loads(uncomment(block.text))
                except tomllib.TOMLDecodeError:
                    continue
                documented |= set(table)
                documented |= {f"executor.{k}" for k in table.get("executor", {})}
            wanted = keys.runtime | {f"executor.{k}" for k in keys.executor}
            missing = sorted(wanted - documented)
            if missing:
                problems.append(
                    f"{doc.name}: no ```toml block documents the runtime configuration keys {', '.join(missing)}"
                )
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_docs: {len(problems)} problem(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"check_docs: {len(files)} file(s) name only what exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
