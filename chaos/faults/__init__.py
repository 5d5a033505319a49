"""The nemesis's faults: one module a kind, each a `Strike` (chaos.faults.strike) named by the
kind it strikes. `KINDS` finds one by name; the schedule's table of kinds and what each may hit
(chaos.generator.NEMESIS_TARGETS) names the same kinds, which a test holds."""

from __future__ import annotations

from chaos.faults.clock import Clock
from chaos.faults.corrupt import Corrupt
from chaos.faults.disk_full import DiskFull
from chaos.faults.drain import Drain
from chaos.faults.kill import Kill
from chaos.faults.membership import Membership
from chaos.faults.membership_partition import MembershipPartition
from chaos.faults.packet import Packet
from chaos.faults.partition import Partition
from chaos.faults.pause import Pause
from chaos.faults.power_loss import PowerLoss
from chaos.faults.restart import Restart
from chaos.faults.starve import Starve
from chaos.faults.strike import Strike
from chaos.faults.stutter import Stutter
from chaos.faults.transfer import Transfer

KINDS: dict[str, type[Strike]] = {
    kind.name: kind
    for kind in (Kill, Pause, Starve, Stutter, Partition, Packet, PowerLoss, Corrupt, Clock, DiskFull, Restart,
                 Membership, Transfer, MembershipPartition, Drain)
}

__all__ = ["KINDS", "Strike"]
