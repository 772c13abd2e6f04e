#!/usr/bin/env python3
"""Checks (and fixes) a CycloneDX SBOM of `keel` against the crates the binary is built from.

    scripts/sbom.py check SBOM.json --target TRIPLE
    scripts/sbom.py fix IN.json OUT.json --target TRIPLE [--epoch SECONDS]

The crates the binary uses are the ones `cargo tree -e normal -p keel-cli
--target TRIPLE` lists: the normal (not dev, not build-only) dependency
graph for that target, with the features a build of keel-cli enables
(cargo's own feature resolver). `check` requires the SBOM to list every
one of them, by name and version, and nothing else: no crate that is only
a dev- or build-dependency, none of another platform, none from
Cargo.lock that the binary does not use. It prints one line of counts on
success; on failure it lists what is missing and what is extra and exits 1.

`fix` makes cargo-cyclonedx's output exact and reproducible. cargo-cyclonedx
reads `cargo metadata`, whose resolve counts a weak dependency feature
(`quinn?/rustls-aws-lc-rs` in reqwest) as enabling the optional crate, so
it lists crates the binary never compiles (quinn and its dependencies);
`fix` removes those — only crates absent from cargo's feature-resolved
graph, each named on stderr — and never adds one, so `check` still finds
anything cargo-cyclonedx missed. It also replaces the build directory in
references by `.`, the timestamp by `--epoch` and the random serial number
by one derived from the content, so one commit gives one SBOM.
"""

import argparse
import datetime
import hashlib
import os
import uuid
import json
import subprocess
import sys
from urllib.parse import unquote


def used_crates(package: str, target: str) -> set[tuple[str, str]]:
    """(name, version) of every crate in the binary's normal dependency graph."""
    output = subprocess.run(
        [
            "cargo", "tree", "--locked", "--offline", "-e", "normal",
            "-p", package, "--target", target, "--prefix", "none",
            "--no-dedupe", "--format", "{p}",
        ],
        check=True, capture_output=True, text=True,
    ).stdout
    crates = set()
    for line in output.splitlines():
        words = line.split()
        if len(words) < 2 or not words[1].startswith("v"):
            continue
        crates.add((words[0], words[1][1:]))
    return crates


def sbom_crates(bom: dict) -> tuple[set[tuple[str, str]], tuple[str, str] | None]:
    """(name, version) of every cargo component of the SBOM, and its subject."""
    def key(component: dict) -> tuple[str, str] | None:
        purl = component.get("purl", "")
        if purl.startswith("pkg:cargo/"):
            name_version = unquote(purl[len("pkg:cargo/"):].split("?")[0].split("#")[0])
            name, _, version = name_version.rpartition("@")
            return (name, version)
        if "name" in component and "version" in component:
            return (component["name"], component["version"])
        return None

    found = set()
    pending = list(bom.get("components", []))
    while pending:
        component = pending.pop()
        pending.extend(component.get("components", []))
        if component.get("type") == "file":
            continue  # the binary itself, as a file of the subject
        crate = key(component)
        if crate:
            found.add(crate)
    subject = bom.get("metadata", {}).get("component")
    return found, key(subject) if subject else None


def check(args: argparse.Namespace) -> int:
    with open(args.sbom, encoding="utf-8") as file:
        bom = json.load(file)
    if bom.get("bomFormat") != "CycloneDX":
        print(f"{args.sbom}: not a CycloneDX document", file=sys.stderr)
        return 1

    used = used_crates(args.package, args.target)
    listed, subject = sbom_crates(bom)
    if subject is not None:
        listed.add(subject)
    if not any(name == args.package for name, _ in listed):
        print(f"{args.sbom}: {args.package} itself is not named", file=sys.stderr)
        return 1

    missing = sorted(used - listed)
    extra = sorted(listed - used)
    for name, version in missing:
        print(f"missing from the SBOM: {name} {version}", file=sys.stderr)
    for name, version in extra:
        print(f"in the SBOM but not in the binary's graph: {name} {version}", file=sys.stderr)
    if missing or extra:
        print(f"{args.sbom}: {len(missing)} missing, {len(extra)} extra", file=sys.stderr)
        return 1

    with open("Cargo.lock", encoding="utf-8") as file:
        locked = file.read().count("[[package]]")
    print(f"sbom: {len(listed)} crates, exactly the binary's graph "
          f"for {args.target} ({locked} in Cargo.lock)")
    return 0


def fix(args: argparse.Namespace) -> int:
    with open(args.input, encoding="utf-8") as file:
        bom = json.load(file)
    used = used_crates(args.package, args.target)

    def component_key(component: dict) -> tuple[str, str] | None:
        found, _ = sbom_crates({"components": [dict(component, components=[])]})
        return found.pop() if found else None

    removed_refs = set()
    kept = []
    for component in bom.get("components", []):
        key = component_key(component)
        if key is not None and key not in used:
            removed_refs.add(component.get("bom-ref"))
            print(f"sbom: removed {key[0]} {key[1]}: not in the binary's graph", file=sys.stderr)
            continue
        kept.append(component)
    bom["components"] = kept
    bom["dependencies"] = [
        {**dependency, "dependsOn": [ref for ref in dependency.get("dependsOn", []) if ref not in removed_refs]}
        for dependency in bom.get("dependencies", [])
        if dependency.get("ref") not in removed_refs
    ]

    text = json.dumps(bom, indent=2, sort_keys=True)
    root = os.path.abspath(".")
    text = text.replace(f"file://{root}/", "file://./").replace(f"file://{root}", "file://.")
    bom = json.loads(text)
    bom.pop("serialNumber", None)
    if args.epoch is not None:
        moment = datetime.datetime.fromtimestamp(int(args.epoch), datetime.timezone.utc)
        bom.setdefault("metadata", {})["timestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    content = json.dumps(bom, indent=2, sort_keys=True).encode()
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "keel-sbom:" + hashlib.sha256(content).hexdigest())
    bom["serialNumber"] = f"urn:uuid:{serial}"
    with open(args.output, "w", encoding="utf-8") as file:
        json.dump(bom, file, indent=2, sort_keys=True)
        file.write("\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser("check", help="check an SBOM against the binary's graph")
    checking.add_argument("sbom")
    fixing = commands.add_parser("fix", help="remove crates the binary does not use; make it reproducible")
    fixing.add_argument("input")
    fixing.add_argument("output")
    fixing.add_argument("--epoch", help="the SBOM's timestamp, in seconds (SOURCE_DATE_EPOCH)")
    for command in (checking, fixing):
        command.add_argument("--target", required=True, help="the target triple the binary was built for")
        command.add_argument("--package", default="keel-cli")
    args = parser.parse_args()
    return check(args) if args.command == "check" else fix(args)


if __name__ == "__main__":
    sys.exit(main())
