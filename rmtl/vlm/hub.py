"""The Hugging Face hub as the loader meets it: whether downloads are off, whether the hub can be
reached, and the local cache of its files. huggingface_hub is imported only when asked."""

from __future__ import annotations

import os
from pathlib import Path


def hf_offline() -> bool:
    """Whether Hugging Face downloads are disabled (read now, not at import time)."""
    flag = os.environ.get("HF_HUB_OFFLINE", "")
    if flag.strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


HUB_PROBE_TIMEOUT_S = 3.0
"""How long a check that the Hugging Face hub can be reached may take before a download."""


def hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the Hugging Face hub cannot be reached (None if a TCP connection to it, or to
    the HTTPS proxy, opens within ``timeout``): checked before any download, so that a
    machine without a network fails at once instead of after the hub client's retries."""
    import socket
    import threading
    from urllib.parse import urlparse

    from huggingface_hub import constants

    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if os.environ.get(k)),
                 None)
    url = urlparse(proxy if proxy and "://" in proxy else (f"http://{proxy}" if proxy else constants.ENDPOINT))
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(e.strerror or str(e) or type(e).__name__)

    t = threading.Thread(target=probe, daemon=True)  # name resolution ignores the socket timeout
    t.start()
    t.join(timeout + 0.5)
    if not result:
        return f"no answer from {host}:{port} within {timeout:.0f} s"
    return None if result[0] is None else f"cannot connect to {host}:{port}: {result[0]}"


def hf_cache_dir(cache_dir: str | Path | None = None) -> str:
    from huggingface_hub import constants

    return str(cache_dir) if cache_dir else str(constants.HF_HUB_CACHE)


def cached_hf_file(repo: str, filenames: tuple[str, ...], cache_dir: str | Path | None) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    for name in filenames:
        hit = try_to_load_from_cache(repo, name, cache_dir=cache_dir)
        if isinstance(hit, str):
            return hit
    return None
