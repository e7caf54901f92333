"""The dashboard's own temporary files: one private folder under the system temp directory, entries with a lifetime.

Imports copy an upload into a scratch folder (`scratch`) that is deleted as soon as the import ends. Metric exports
are returned to gradio by path and copied by it into its own cache while the answer is prepared, so the exported
file has to outlive the handler: it goes to a folder from `short_lived` and is deleted by `sweep_temp` once older
than LIFETIME_S. `sweep_temp` also runs at the app's start, where it clears what a previous process left (its
folders, the `trl-import-*` / `metrics-*` folders of older releases, and gradio's upload folder entries older than
gradio's own lifetime).

The folder lives under the system temp directory because gradio only serves returned files from there, the working
directory or the upload folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LIFETIME_S = 600.0  # an export's file: gradio copies it into its cache within the request
UPLOAD_LIFETIME_S = 600.0  # gradio's upload entries: as the app's `delete_cache` (ui/serving.py UPLOAD_CACHE)
LEGACY_PREFIXES = ("trl-import-", "metrics-")  # folders older releases made in the system temp dir and kept


def temp_root() -> Path:
    """The dashboard's private temp folder (mode 0700, this user's), created when missing."""
    root = Path(tempfile.gettempdir()) / f"grpo-dashboard-{os.getuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = root.lstat()
    # Another user could have made the folder first in a shared /tmp: never write into theirs.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{root} is not a folder of this user; remove it or set TMPDIR to a private folder.")
    if stat.S_IMODE(info.st_mode) != 0o700:
        root.chmod(0o700)
    return root


def _new_folder(kind: str) -> Path:
    folder = temp_root() / f"{kind}-{int(time.time())}-{secrets.token_hex(6)}"
    folder.mkdir(mode=0o700)
    return folder


@contextmanager
def scratch(kind: str) -> Iterator[Path]:
    """A fresh private folder for one operation, deleted (with everything in it) when the block ends."""
    folder = _new_folder(kind)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def short_lived(kind: str) -> Path:
    """A fresh private folder for a file that must outlive the request (an export): `sweep_temp` deletes it after
    LIFETIME_S. Sweeps the older ones first, so they never pile up."""
    sweep_temp(uploads=False)
    return _new_folder(kind)


def _age(path: Path, now: float) -> float:
    try:
        return now - path.lstat().st_mtime
    except OSError:
        return 0.0


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return False
    except OSError:
        return False
    return True


def gradio_upload_dir() -> Path:
    """gradio's upload folder, as `gradio.utils.get_upload_folder` finds it (GRADIO_TEMP_DIR, else <tmp>/gradio)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio").resolve()


def sweep_temp(
    now: float | None = None,
    lifetime_s: float = LIFETIME_S,
    *,
    uploads: bool = True,
    upload_dir: str | Path | None = None,
    upload_lifetime_s: float = UPLOAD_LIFETIME_S,
) -> int:
    """Delete the dashboard's temp entries older than `lifetime_s` (and older releases' leftovers); with `uploads`,
    also gradio's upload folder entries older than `upload_lifetime_s`. Returns how many entries were deleted.

    Call it once when the app starts (with `uploads=True`): a restart otherwise keeps whatever the previous process
    left. Exports call it with `uploads=False` (gradio's cache also holds files it still serves, e.g. examples).
    """
    now = time.time() if now is None else now
    removed = 0
    for entry in temp_root().iterdir():
        if _age(entry, now) > lifetime_s:
            removed += _remove(entry)
    tmp = Path(tempfile.gettempdir())
    for prefix in LEGACY_PREFIXES:
        for entry in tmp.glob(f"{prefix}*"):
            try:
                mine = entry.lstat().st_uid == os.getuid() and entry.is_dir() and not entry.is_symlink()
            except OSError:
                continue
            if mine and _age(entry, now) > lifetime_s:
                removed += _remove(entry)
    if uploads:
        folder = Path(upload_dir) if upload_dir is not None else gradio_upload_dir()
        if folder.is_dir():
            for entry in folder.iterdir():
                if _age(entry, now) > upload_lifetime_s:
                    removed += _remove(entry)
    return removed
