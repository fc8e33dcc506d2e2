"""The template catalog: bundled templates, the user's in `$WARDEN_HOME/templates/`, or a file."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from warden.core.errors import InvalidInput, NotFound
from warden.core.templates import Template, parse_template

__all__ = ["TemplateCatalog", "TemplateFile"]

_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class TemplateFile:
    """Where a template lives and what identifies its current content cheaply (for caches)."""

    name: str
    path: Path
    origin: str  # "user", "bundled" or "file"
    mtime_ns: int
    size: int
    # The inode and change time too: a template replaced by one of the same size and modification
    # time (`cp -p`, `rsync -t`, tar, `touch -r`) kept the old one's resolution, and its workspaces
    # the old dependencies. No one can set a change time, and a replacing rename gives a new inode.
    inode: int = 0
    ctime_ns: int = 0

    @property
    def stamp(self) -> str:
        return f"{self.path}|{self.mtime_ns}|{self.size}|{self.inode}|{self.ctime_ns}"


def _bundled_dir() -> Path:
    return Path(str(resources.files("warden") / "templates"))


class TemplateCatalog:
    """Finds and parses templates; a user template shadows a bundled one of the same name."""

    def __init__(self, user_dir: Path) -> None:
        self.user_dir = user_dir
        self.bundled_dir = _bundled_dir()

    @staticmethod
    def is_file_ref(ref: str) -> bool:
        return "/" in ref or ref.endswith(_SUFFIXES)

    def locate(self, ref: str) -> TemplateFile:
        """The file behind a template name or path; NotFound lists what exists."""
        if self.is_file_ref(ref):
            return self._stat(Path(ref).expanduser().absolute(), Path(ref).stem, "file", ref)
        for origin, folder in (("user", self.user_dir), ("bundled", self.bundled_dir)):
            for suffix in _SUFFIXES:
                path = folder / f"{ref}{suffix}"
                if path.is_file():
                    return self._stat(path, ref, origin, ref)
        names = ", ".join(sorted({t.name for t in self.files()})) or "none"
        raise NotFound(f"no template named {ref!r} (known: {names}); `warden template list` shows them, "
                       "or pass a YAML file path")

    def _stat(self, path: Path, name: str, origin: str, ref: str) -> TemplateFile:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise NotFound(f"template file {ref!r} does not exist") from None
        except OSError as exc:
            raise InvalidInput(f"cannot read template file {ref!r}: {exc.strerror}") from None
        return TemplateFile(name, path, origin, st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)

    def files(self) -> list[TemplateFile]:
        """Every template file, user ones first; one entry per name."""
        found: dict[str, TemplateFile] = {}
        for origin, folder in (("user", self.user_dir), ("bundled", self.bundled_dir)):
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if path.suffix in _SUFFIXES and path.stem not in found and path.is_file():
                    found[path.stem] = self._stat(path, path.stem, origin, str(path))
        return sorted(found.values(), key=lambda f: f.name)

    def load(self, ref: str) -> tuple[Template, TemplateFile]:
        """Parse and validate the template `ref` (name or file)."""
        located = self.locate(ref)
        return self.parse(located), located

    @staticmethod
    def parse(located: TemplateFile) -> Template:
        try:
            text = located.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read template {located.path}: {exc}") from None
        label = str(located.path) if located.origin != "bundled" else f"{located.name}.yaml (bundled)"
        return parse_template(text, label, default_name=located.name)

    def validate_file(self, path: str) -> Template:
        """Validate one file (`warden template validate FILE`)."""
        located = self._stat(Path(path).expanduser().absolute(), Path(path).stem, "file", path)
        return self.parse(located)

