"""The corrupt nemesis's damage (chaos.corrupt): one file, one bit or one cut, inside the bytes
that hold data, reproducible from the seed; and what counts as a refusal for damage."""

from __future__ import annotations

import random
from pathlib import Path

from chaos.corrupt import candidates, damage, refusal_for_damage, refused_for_damage, written_bytes
from raftmq.replication.pysyncobj.raft_journal_format import JOURNAL_MAGIC, encode_record


def member(tmp_path: Path) -> Path:
    raft, bodies = tmp_path / "raft", tmp_path / "bodies"
    raft.mkdir(parents=True)
    bodies.mkdir()
    records = b"".join(encode_record(i, 1, b"command %d" % i) for i in range(1, 20))
    (raft / "raft.journal").write_bytes(JOURNAL_MAGIC + records + bytes(4096))  # reserved zeros after the records
    (raft / "raft.journal.meta").write_bytes(b"\x80")
    (bodies / "00000000000000000001.seg").write_bytes(bytes(range(256)) * 4)
    return tmp_path


def test_damage_changes_one_bit_or_cuts_one_file_within_its_data(tmp_path: Path) -> None:
    root = member(tmp_path / "a")
    before = {p: p.read_bytes() for p in candidates(root)}
    assert [p.name for p in before] == ["raft.journal", "00000000000000000001.seg"]  # never the metadata
    assert written_bytes(root / "raft" / "raft.journal") == len(before[root / "raft" / "raft.journal"]) - 4096
    kinds = set()
    for seed in range(30):
        for path, data in before.items():
            path.write_bytes(data)
        done = damage(root, random.Random(seed))
        assert done is not None
        kinds.add(done.kind)
        path = root / done.path
        after, old = path.read_bytes(), before[path]
        assert done.offset < written_bytes(path) if done.kind == "bitflip" else done.offset < len(old)
        if done.kind == "bitflip":
            diff = [i for i in range(len(old)) if old[i] != after[i]]
            assert diff == [done.offset] and bin(old[done.offset] ^ after[done.offset]).count("1") == 1
        else:
            assert after == old[:done.offset]
        assert all(p.read_bytes() == d for p, d in before.items() if p != path)  # only one file touched
    assert kinds == {"bitflip", "truncate"}
    other = member(tmp_path / "b")
    assert damage(other, random.Random(7)) == damage(member(tmp_path / "c"), random.Random(7))  # the seed decides
    assert damage(tmp_path / "empty", random.Random(1)) is None


def test_a_refusal_for_damage_is_told_from_other_failures() -> None:
    assert refused_for_damage(
        "raftmq node n1: data/g1/n1/raft/raft.journal: damaged record at offset 70 ... corruption")
    assert refused_for_damage("raftmq node n2: journal corrupt: bad magic; refusing to start (restore that file...)")
    assert refused_for_damage("raftmq node n3: raft.snapshot: Raft snapshot fails its checksum")
    assert not refused_for_damage("raftmq node n1: cannot listen on 10.99.1.1:61613: Address already in use")
    last_words = ("raftmq node n2: data/g1/n2/raft/raft.journal: damaged record at offset 9\n"
                  "level='warning' event='node.gc_pause'")
    assert refusal_for_damage(last_words) == "raftmq node n2: data/g1/n2/raft/raft.journal: damaged record at offset 9"
