"""One real ClickHouse node: the chdb-core engine serving the native and HTTP protocols.

Run as ``python -m airflow_provider_s3ch.local.node WORKDIR``. ``WORKDIR`` holds the
``config.xml`` that :class:`~airflow_provider_s3ch.local.stack.LocalStack` wrote
(ports, data path, ``query_log``, ``remote_servers``, users, ``zookeeper``). The engine runs as
clickhouse-local inside this process; ``SYSTEM START LISTEN`` opens the listeners,
and a long ``sleepEachRow`` query keeps them open. Ending the process stops the node.

The engine is chdb's compiled extension module (``chdb/_chdb*.so``), loaded on its own:
``import chdb`` would run the package's ``__init__``, whose import-time probe opens an
engine session and closes it, and that close shuts down the process-wide registry of
streaming tables, so that every ``CREATE TABLE … ENGINE = S3Queue`` after it fails with
"Shutdown was called".
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

KEEP_ALIVE = (
    "SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; "
    "SELECT sleepEachRow(1) FROM numbers(1000000000) "
    "SETTINGS function_sleep_max_microseconds_per_block = 0, max_block_size = 1, max_execution_time = 0"
)

#: ``dlopen``'s RTLD_DEEPBIND (Linux), as chdb's own ``__init__`` preloads its extension with.
_RTLD_DEEPBIND = 0x00008


def engine_path() -> Path:
    """The file of chdb's compiled extension module (``_chdb.abi3.so``), found beside the ``chdb`` package
    without importing it.

    :raises ModuleNotFoundError: chdb-core is not installed, or holds no ``_chdb`` extension.
    """
    spec = importlib.util.find_spec("chdb")  # finds the package; runs nothing of it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("chdb-core is not installed: pip install 'airflow-provider-s3ch[local]'", name="chdb")
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = Path(folder) / f"_chdb{suffix}"
            if candidate.is_file():
                return candidate
    folders = list(spec.submodule_search_locations)
    raise ModuleNotFoundError(f"no _chdb extension module in {folders}", name="chdb._chdb")


def load_engine() -> ModuleType:
    """Load chdb's extension module as ``chdb._chdb`` without running ``chdb/__init__.py`` (and so without its
    import-time probe, which breaks streaming engines for the rest of the process)."""
    path = engine_path()
    if sys.platform == "linux":
        # What chdb's __init__ does first: with RTLD_DEEPBIND the extension's pybind11 stubs take operator
        # new/delete from the engine's jemalloc, not from a libstdc++ loaded before.
        import ctypes

        try:
            ctypes.CDLL(str(path), mode=sys.getdlopenflags() | _RTLD_DEEPBIND)
        except OSError:
            pass
    spec = importlib.util.spec_from_file_location("chdb._chdb", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    """Serve until killed.

    :param argv: ``[WORKDIR]``.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m airflow_provider_s3ch.local.node WORKDIR", file=sys.stderr)
        return 2
    workdir = os.path.abspath(args[0])
    # Load the engine from a neutral directory: the engine reads ./config.xml when it runs a query.
    os.chdir(os.path.dirname(workdir))
    engine = load_engine()
    os.chdir(workdir)
    engine.query(KEEP_ALIVE, "TabSeparated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
