#!/usr/bin/env python3
"""Adds the licenses of the native code a wheel carries.

Usage: wheel_licenses.py --static PREFIX WHEEL   (the manylinux build: scripts/build_wheel.sh)
       wheel_licenses.py WHEEL                   (a wheel auditwheel grafted system libraries into)
Both rewrite WHEEL in place.

--static: the libraries scripts/build_deps.sh built into PREFIX and linked into _core. Each
PREFIX/share/licenses/<library>/ holds its license files and Debian's copyright file of the
source package it was built from (PREFIX/share/licenses/VERSIONS names the versions); zig's
libc++, libc++abi and libunwind, linked statically too, add LLVM's license. They go into the wheel
as <dist-info>/licenses/third_party/<library>/<file>, listed in THIRD_PARTY_NOTICES.txt and as
License-File entries in METADATA (PEP 639). Exits non-zero, changing nothing, when a library has
no license file.

Without --static:
each grafted library (<pkg>.libs/lib<name>-<hash>.so.N) is traced back to the system file it
was copied from: auditwheel names the copy after that file and the first 8 hex digits of its
SHA-256, so the match is exact. `dpkg -S` names the Debian package that installed the file, and
that package's /usr/share/doc/<package>/copyright goes into the wheel as
<dist-info>/licenses/third_party/<package>.copyright, listed in THIRD_PARTY_NOTICES.txt next to
it and as License-File entries in METADATA (PEP 639). Exits non-zero, changing nothing, when any
grafted library cannot be traced to a package with a copyright file: a wheel must not ship code
whose license it does not carry.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

# auditwheel's copylib: f"{base}-{sha256(file)[:8]}.{ext}" for a source file named f"{base}.{ext}".
GRAFTED = re.compile(r"^(?P<base>[^.]+)-(?P<hash>[0-9a-f]{8})\.(?P<ext>.+)$")
LIB_DIRS = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
            "/usr/lib", "/usr/local/lib"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ldconfig_paths(name: str) -> list[str]:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.rsplit("=> ", 1)[1].strip() for line in out.splitlines()
            if line.strip().startswith(name + " ") and "=> " in line]


def source_file(grafted: str) -> Path:
    m = GRAFTED.match(grafted)
    if not m:
        raise LookupError(f"{grafted}: expected auditwheel's <name>-<hash8>.<ext> form")
    name = f"{m['base']}.{m['ext']}"
    candidates = ldconfig_paths(name) + [os.path.join(d, name) for d in LIB_DIRS]
    for c in dict.fromkeys(candidates):
        p = Path(c)
        if p.is_file() and sha256(p.read_bytes()).startswith(m["hash"]):
            return p
    raise LookupError(f"{grafted}: no {name} with SHA-256 {m['hash']}... in {', '.join(LIB_DIRS)}")


def debian_package(path: Path) -> str:
    # Debian 12 merges /lib into /usr/lib, but dpkg knows each file by the path its package uses.
    variants = [str(path), str(path.resolve())]
    for v in list(variants):
        variants.append(v[4:] if v.startswith("/usr/") else "/usr" + v)
    for v in dict.fromkeys(variants):
        r = subprocess.run(["dpkg", "-S", v], capture_output=True, text=True)
        if r.returncode == 0:
            # "libcharls2:amd64: /lib/x86_64-linux-gnu/libcharls.so.2"
            return r.stdout.split(":", 1)[0].split(",")[0].strip()
    raise LookupError(f"{path}: dpkg -S knows no package that installed it")


def package_version(package: str) -> str:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "?"


def license_names(copyright_text: str) -> list[str]:
    # DEP-5 files name each license in "License:" fields.
    names = re.findall(r"^License:[ \t]*(\S[^\n]*)$", copyright_text, re.MULTILINE)
    return list(dict.fromkeys(n.strip() for n in names))


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def static_licenses(prefix: Path) -> tuple[dict[str, bytes], list[str]] | str:
    """(files under licenses/third_party/, notice lines) for PREFIX's libraries, or an error."""
    root = prefix / "share" / "licenses"
    versions = {}
    vfile = root / "VERSIONS"
    if vfile.is_file():
        for line in vfile.read_text().splitlines():
            name, _, version = line.partition(" ")
            versions[name] = version
    files, lines = {}, ["Third-party code linked statically into voxpipe/_core (scripts/build_deps.sh:",
                        "built from Debian's source packages). Each library's license files, and",
                        "Debian's copyright file where its source package has one, are in the folder",
                        "named after it, next to this file.", ""]
    libs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not libs:
        return f"{root}: no license folders (run scripts/build_deps.sh)"
    source_of = {"isa-l": "libisal", "openjpeg": "openjpeg2", "libpng": "libpng1.6", "zstd": "libzstd"}
    for lib in libs:
        texts = sorted(p for p in lib.iterdir() if p.is_file())
        if not [p for p in texts if p.name != "debian-copyright"]:
            return f"{lib}: no license file"
        for p in texts:
            files[f"{lib.name}/{p.name}"] = p.read_bytes()
        version = versions.get(source_of.get(lib.name, lib.name), "?")
        lines.append(f"{lib.name}  (Debian source {source_of.get(lib.name, lib.name)} {version})\n"
                     f"    {', '.join(p.name for p in texts)}")
    # libc++, libc++abi, libunwind: zig's copies, the same LLVM license (Apache-2.0 WITH
    # LLVM-exception) in each of its folders.
    try:
        import ziglang  # noqa: PLC0415 (the build's own .venv has it)
    except ImportError:
        return "the ziglang package is not installed: its libc++ license cannot be added"
    zig_lib = Path(ziglang.__file__).parent / "lib"
    for part in ("libcxx", "libcxxabi", "libunwind"):
        lic = zig_lib / part / "LICENSE.TXT"
        if not lic.is_file():
            return f"{lic}: missing"
        files[f"llvm-{part}/LICENSE.TXT"] = lic.read_bytes()
    lines.append("llvm-libcxx, llvm-libcxxabi, llvm-libunwind  (LLVM's C++ runtime, as the ziglang "
                 "package ships it)\n    LICENSE.TXT: Apache-2.0 WITH LLVM-exception")
    return files, lines


def write_wheel(wheel: Path, infos: list[zipfile.ZipInfo], contents: dict[str, bytes],
                dist_info: str, added: dict[str, bytes]) -> None:
    """Rewrites WHEEL with the files ADDED (License-File fields and RECORD updated)."""
    # PEP 639: every file under licenses/ is named by a License-File field.
    meta_name = f"{dist_info}/METADATA"
    meta = contents[meta_name].decode()
    new_fields = "".join(f"License-File: {n[len(dist_info) + len('/licenses/'):]}\n"
                         for n in sorted(added) if n not in contents)
    head, sep, body = meta.partition("\n\n")
    contents[meta_name] = (head + "\n" + new_fields.rstrip("\n") + sep + body).encode()
    contents.update(added)

    record_name = f"{dist_info}/RECORD"
    # Files only: a directory entry in RECORD (auditwheel's zip has them) breaks `auditwheel show`.
    record = [record_line(n, d) for n, d in contents.items()
              if n != record_name and not n.endswith("/")]
    record.append(f"{record_name},,")
    contents[record_name] = ("\n".join(record) + "\n").encode()

    # Rewritten in the original order (dist-info last, as wheels must be), new files before RECORD.
    order = [i.filename for i in infos if i.filename != record_name]
    order += [n for n in added if n not in order] + [record_name]
    modes = {i.filename: i.external_attr for i in infos}
    dates = {i.filename: i.date_time for i in infos}
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for n in order:
            info = zipfile.ZipInfo(n, date_time=dates.get(n, (2026, 1, 1, 0, 0, 0)))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = modes.get(n, 0o644 << 16)
            zf.writestr(info, contents[n])
    tmp.replace(wheel)


def main(wheel_path: str, static_prefix: Path | None = None) -> int:
    wheel = Path(wheel_path)
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        contents = {i.filename: zf.read(i) for i in infos}
    dist_info = next(n.split("/", 1)[0] for n in contents if n.split("/", 1)[0].endswith(".dist-info"))
    if static_prefix is not None:
        got = static_licenses(static_prefix)
        if isinstance(got, str):
            print(f"no license found for linked code: {got}", file=sys.stderr)
            return 1
        files, lines = got
        prefix = f"{dist_info}/licenses/third_party"
        added = {f"{prefix}/{name}": data for name, data in files.items()}
        added[f"{prefix}/THIRD_PARTY_NOTICES.txt"] = ("\n".join(lines) + "\n").encode()
        write_wheel(wheel, infos, contents, dist_info, added)
        print(f"licenses: {len(files)} files of {len(lines) - 5} libraries into {wheel.name}")
        return 0
    grafted = sorted(n for n in contents if re.match(r"^[^/]+\.libs/[^/]+$", n))
    if not grafted:
        print(f"{wheel.name}: no grafted libraries (run auditwheel repair first)", file=sys.stderr)
        return 1

    rows, errors, packages = [], [], {}
    for entry in grafted:
        lib = entry.split("/", 1)[1]
        try:
            src = source_file(lib)
            pkg = debian_package(src)
            copyright_file = Path("/usr/share/doc") / pkg / "copyright"
            if not copyright_file.is_file():
                raise LookupError(f"{lib}: package {pkg} has no {copyright_file}")
        except LookupError as exc:
            errors.append(str(exc))
            continue
        packages[pkg] = copyright_file.read_text(encoding="utf-8", errors="replace")
        rows.append((lib, str(src), pkg, package_version(pkg)))
    if errors:
        print("no license found for a bundled library:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1

    prefix = f"{dist_info}/licenses/third_party"
    added = {}
    lines = ["Third-party libraries bundled in this wheel (in voxpipe.libs/), as built on Debian.",
             "Each library's license and copyright notice, as its Debian package states them,",
             "is in the file named in the last column, next to this one.", ""]
    for lib, src, pkg, version in rows:
        names = ", ".join(license_names(packages[pkg])) or "see the file"
        lines.append(f"{lib}\n    from {src}\n    Debian package {pkg} {version}\n"
                     f"    licenses: {names}\n    {pkg}.copyright")
    for pkg, text in sorted(packages.items()):
        added[f"{prefix}/{pkg}.copyright"] = text.encode()
    added[f"{prefix}/THIRD_PARTY_NOTICES.txt"] = ("\n".join(lines) + "\n").encode()

    write_wheel(wheel, infos, contents, dist_info, added)
    for lib, src, pkg, version in rows:
        print(f"license: {lib} <- {src} ({pkg} {version})")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--static":
        sys.exit(main(args[2], Path(args[1])))
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(args[0]))
