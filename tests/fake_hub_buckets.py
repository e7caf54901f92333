"""Bucket reads of the fake Hub (fake_hub.py): a bucket's info and its file tree under a prefix, what `hf buckets
sync` (huggingface_hub's CLI) lists before it uploads. Uploads themselves are fake_hub.py's (Xet token, batch)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def iso_ms(ms: Any) -> str | None:
    """An upload's mtime (milliseconds since the epoch) as the Hub lists it (ISO 8601)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(int(ms) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _now() -> str:
    return iso_ms(datetime.now(timezone.utc).timestamp() * 1000) or ""


def bucket_read_route(handler: Any, hub: Any, parts: list[str], query: dict[str, list[str]]) -> bool:
    """Serve GET /api/buckets/NS/NAME (info) and /api/buckets/NS/NAME/tree[/PREFIX]; False when the path is not one."""
    if parts[:2] != ["api", "buckets"] or len(parts) < 4 or (len(parts) > 4 and parts[4] != "tree"):
        return False
    bucket = f"{parts[2]}/{parts[3]}"
    if handler._forbidden(parts[2]):
        return True
    if bucket not in hub.buckets:
        handler._json(404, {"error": f"Bucket {bucket} not found"}, {"X-Error-Code": "BucketNotFound"})
        return True
    files = hub.bucket_meta.get(bucket, {})
    if len(parts) == 4:
        handler._json(
            200,
            {
                "id": bucket,
                "private": True,
                "createdAt": _now(),
                "totalFiles": len(files),
                "size": sum(int(op.get("size") or 0) for op in files.values()),
            },
        )
        return True
    prefix = "/".join(parts[5:])
    recursive = query.get("recursive", ["false"])[0] == "true"
    out = []
    for path, op in sorted(files.items()):
        rest = path[len(prefix) + 1 :] if prefix and path.startswith(prefix + "/") else (None if prefix else path)
        if rest is None or (not recursive and "/" in rest):
            continue
        out.append(
            {
                "type": "file",
                "path": path,
                "size": int(op.get("size") or 0),
                "xetHash": op["xetHash"],
                "mtime": iso_ms(op.get("mtime")),
                "uploadedAt": _now(),
            }
        )
    handler._json(200, out)
    return True
