"""Tiny Python wheels and npm tarballs made on the spot, so env tests need no network."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, name: str, version: str = "1.0", *, requires: tuple[str, ...] = (),
               files: dict[str, str] | None = None, scripts: dict[str, str] | None = None) -> Path:
    """Write a pure-Python wheel `name-version-py3-none-any.whl` into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    contents = dict(files or {f"{module}/__init__.py": f"VERSION = {version!r}\n"})
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    contents[f"{dist}/METADATA"] = "\n".join(meta) + "\n"
    contents[f"{dist}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: warden-tests\nRoot-Is-Purelib: true\n"
                                  "Tag: py3-none-any\n")
    contents[f"{dist}/top_level.txt"] = module + "\n"
    if scripts:
        contents[f"{dist}/entry_points.txt"] = "[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in scripts.items())
    record = [_record_line(k, v.encode()) for k, v in contents.items()]
    record.append(f"{dist}/RECORD,,")
    contents[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in contents.items():
            zf.writestr(arc, text)
    return path


_BACKEND = """\
# An in-tree PEP 517 backend: building this sdist runs `BUILD_CODE` first, then writes a wheel
# whose module holds RESULT, what that code returned (so a test can see what the build saw).
import base64, hashlib, os, zipfile

NAME, VERSION = {name!r}, {version!r}


def _build_code():
{build_code}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    result = _build_code()
    dist = NAME + "-" + VERSION + ".dist-info"
    files = {{NAME + "/__init__.py": "RESULT = " + repr(result) + "\\n",
             dist + "/METADATA": "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n",
             dist + "/WHEEL": ("Wheel-Version: 1.0\\nGenerator: warden-tests\\nRoot-Is-Purelib: true\\n"
                               "Tag: py3-none-any\\n")}}
    record = []
    for arc, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(arc + ",sha256=" + digest + "," + str(len(text.encode())))
    files[dist + "/RECORD"] = "\\n".join(record + [dist + "/RECORD,,"]) + "\\n"
    name = NAME + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    return name
"""


def make_sdist(folder: Path, name: str, version: str, build_code: str) -> Path:
    """Write an sdist `name-version.tar.gz` whose build runs `build_code` (the body of a function
    returning a repr-able value) through an in-tree backend, so no setuptools is needed offline."""
    folder.mkdir(parents=True, exist_ok=True)
    body = "\n".join("    " + line for line in build_code.strip().splitlines())
    root = f"{name}-{version}"
    files = {
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{root}/pyproject.toml": ('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                   'backend-path = ["."]\n'),
        f"{root}/backend.py": _BACKEND.format(name=name, version=version, build_code=body),
    }
    return _write_tar_gz(folder / f"{root}.tar.gz", files)


def make_npm_package(folder: Path, name: str, version: str = "1.0.0", *, main: str | None = None,
                     dependencies: dict[str, str] | None = None) -> Path:
    """Write an npm tarball `name-version.tgz` (package/package.json + package/index.js)."""
    folder.mkdir(parents=True, exist_ok=True)
    pkg = {"name": name, "version": version, "main": "index.js", "dependencies": dependencies or {}}
    files = {"package/package.json": json.dumps(pkg),
             "package/index.js": main or f"module.exports = {{name: {name!r}, version: {version!r}}};\n"}
    return _write_tar_gz(folder / f"{name.replace('/', '-').lstrip('@')}-{version}.tgz", files)


def _write_tar_gz(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for arc, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(arc)
            info.size = len(data)
            info.mode = 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


TEMPLATE = """\
# A test template built from local wheels and npm tarballs only.
name: {name}
description: "local packages, no network"
python:
  version: "{python}"
  dependencies:
    - alpha
    - beta<3
nodejs:
  version: "{node}"
  runtime: npm
  dependencies:
    tiny-top: "file:{npm}/tiny-top-1.0.0.tgz"
"""


def make_local_index(folder: Path) -> dict[str, Path]:
    """Wheels (alpha needs beta; gamma; beta 2.1 and 3.0) and npm tarballs in `folder`."""
    wheels = folder / "wheels"
    npm = folder / "npm"
    make_wheel(wheels, "alpha", "1.0", requires=("beta>=2",), scripts={"alpha-hello": "alpha:hello"},
               files={"alpha/__init__.py": "VERSION = '1.0'\n\ndef hello():\n    print('hello from alpha')\n"})
    make_wheel(wheels, "beta", "2.1")
    make_wheel(wheels, "beta", "3.0")
    make_wheel(wheels, "gamma", "0.5", requires=("beta",))
    dep = make_npm_package(npm, "tiny-dep", "1.0.0")
    make_npm_package(npm, "tiny-top", "1.0.0", dependencies={"tiny-dep": f"file:{dep}"},
                     main="const d = require('tiny-dep');\nmodule.exports = {top: 'tiny-top', dep: d.name};\n")
    make_npm_package(npm, "tiny-extra", "1.2.0")
    return {"wheels": wheels, "npm": npm}


def write_template(folder: Path, name: str = "local", *, python: str = "3.12", node: str = "20") -> Path:
    paths = make_local_index(folder)
    path = folder / f"{name}.yaml"
    path.write_text(TEMPLATE.format(name=name, python=python, node=node, npm=paths["npm"]))
    return path
