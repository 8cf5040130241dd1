#!/usr/bin/env python3
"""Checks that the tree's references to the docs resolve: every
``docs/<file>.md`` named in a tracked file exists, and so does the section it
names, as ``docs/<file>.md#anchor`` (GitHub's heading anchors) or as
``docs/<file>.md, "Section title"`` (one or more quoted titles, as comments
cite them: a heading's text, or its start, as "Near and far cores" for
"Near and far cores (2026-11-28 ...)"); relative Markdown links between the docs (``[x](file.md#anchor)``)
too; and nothing cites the removed ``notes/`` folder. Prints each dangling
reference as file:line and exits 1 if there is one.

    python3 ci/check_doc_refs.py            # the whole tree
    python3 ci/check_doc_refs.py FILE ...   # only those files
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# docs/x.md, docs/x.md#anchor, docs/x.md, "Title", "Other title" (a comment's
# reference may go on over its next lines: they are joined first)
DOC_REF = re.compile(r'(?<![\w/.-])(docs/[\w./-]+?\.md)(#[\w-]+)?((?:,?\s+"[^"]+")*)')
TITLE = re.compile(r'"([^"]+)"')
COMMENT_PREFIX = re.compile(r'^\s*(?://+|#+(?!\w)|\*|--)?\s?')
# [text](target.md#anchor) or [text](#anchor) inside Markdown files
MD_LINK = re.compile(r'\]\(([^)\s]*?\.md)?(#[\w-]+)?\)')
NOTES = re.compile(r'(?<![\w/.-])(?:docs/)?notes/[\w./-]+')
FENCE = re.compile(r'^\s*(```|~~~)')


def tracked_files(args):
    if args:
        return args
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True, text=True).stdout
    return out.split()


def slug(title):
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return s.replace(" ", "-")


def plain(title):
    return re.sub(r"[`*]", "", title).strip().lower()


_headings = {}


def headings(path):
    """(titles, anchors) of the Markdown file at `path` (relative to ROOT)."""
    if path not in _headings:
        titles, anchors, seen = set(), set(), {}
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            fenced = False
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    t = m.group(1)
                    titles.add(plain(t))
                    a = slug(t)
                    n = seen.get(a, 0)
                    seen[a] = n + 1
                    anchors.add(a if n == 0 else "%s-%d" % (a, n))
        _headings[path] = (titles, anchors)
    return _headings[path]


def check_target(doc, anchor, titles, where, errors):
    if not os.path.isfile(os.path.join(ROOT, doc)):
        errors.append("%s: %s does not exist" % (where, doc))
        return
    known_titles, known_anchors = headings(doc)
    if anchor and anchor[1:] not in known_anchors:
        errors.append("%s: %s has no heading with the anchor %s" % (where, doc, anchor))
    for t in titles:
        # The title, or the start of one (a results heading goes on with its date).
        p = plain(t)
        if not any(h == p or (h.startswith(p) and not h[len(p)].isalnum()) for h in known_titles):
            errors.append('%s: %s has no section "%s"' % (where, doc, t))


def check_file(path, errors):
    try:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            lines = f.readlines()
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return
    is_md = path.endswith(".md")
    # The lines joined, comment markers dropped; starts[i]: where line i + 1 begins.
    text, starts = "", []
    for line in lines:
        starts.append(len(text))
        text += (line if is_md else COMMENT_PREFIX.sub("", line, count=1)).rstrip("\n") + "\n"
    for m in DOC_REF.finditer(text):
        line_no = next(i for i in range(len(starts), 0, -1) if starts[i - 1] <= m.start())
        doc, anchor, quoted = m.group(1), m.group(2), m.group(3)
        titles = [" ".join(t.split()) for t in TITLE.findall(quoted or "")]
        check_target(doc, anchor, titles, "%s:%d" % (path, line_no), errors)
    for i, line in enumerate(lines, 1):
        where = "%s:%d" % (path, i)
        for m in NOTES.finditer(line):
            errors.append("%s: %s (docs/notes/ was removed)" % (where, m.group(0)))
        if is_md:
            for m in MD_LINK.finditer(line):
                target, anchor = m.group(1), m.group(2)
                if target and ("://" in target or target.startswith("docs/")):
                    continue  # external, or a docs/ path checked above
                doc = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
                if target or anchor:
                    check_target(doc, anchor, [], where, errors)


def main(argv):
    errors = []
    me = os.path.relpath(os.path.abspath(__file__), ROOT)
    for path in tracked_files(argv[1:]):
        if path != me:  # (its examples name no real file)
            check_file(path, errors)
    for e in errors:
        print(e)
    if errors:
        print("check_doc_refs: %d dangling reference(s)" % len(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
