"""bench/cpu_by_library.py's reading of `perf report --sort pid,dso`: each thread's samples go
to its node, each shared object to its library."""

from __future__ import annotations

from bench.cpu_by_library import library, shares

REPORT = """\
# Overhead  Pid:Command    Shared Object
#
    30.00%    101:python   libpython3.11.so.1.0
     6.00%    101:python   67e13f47739aae15aa5d__mypyc.cpython-311-x86_64-linux-gnu.so
     4.00%    105:python   [kernel.kallsyms]
     3.00%    105:python   libpython3.11.so.1.0
    10.00%    201:python   libpython3.11.so.1.0
     1.00%    201:python   _block.cpython-311-x86_64-linux-gnu.so
     2.00%    201:python   _frame.cpython-311-x86_64-linux-gnu.so
     9.00%    999:java     libjvm.so
"""


def test_each_thread_counts_for_its_node_and_each_object_for_its_library() -> None:
    threads = {101: (101, "n1"), 105: (101, "n1"), 201: (201, "n2")}  # 105: n1's tick thread
    found = shares(REPORT, threads)
    assert found == {
        "n1": {"interpreter (libpython)": 33.0, "compiled hot modules": 6.0, "kernel": 4.0},
        "n2": {"interpreter (libpython)": 10.0, "lz4": 3.0},
    }  # pid 999 is no node of the bench: left out


def test_libraries() -> None:
    assert library("libc.so.6") == "libc (malloc, memcpy)"
    assert library("_cmsgpack.cpython-311-x86_64-linux-gnu.so") == "msgpack"
    assert library("loop.cpython-311-x86_64-linux-gnu.so") == "uvloop"
    assert library("_rust.abi3.so") == "other"
