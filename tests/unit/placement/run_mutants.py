"""Deliberately broken copies of the engine (mutants), each of which a property test must catch.

    python3 tests/unit/placement/run_mutants.py            # every mutant
    python3 tests/unit/placement/run_mutants.py auto spread

Each mutant copies operator/ into a temporary directory, makes one edit to one module (the text must occur
exactly once, so a mutant that no longer applies fails loudly instead of passing), and runs the named
property test against the copy (PYTHONPATH first). A mutant is *caught* when that test fails. Not collected
by pytest (no test_ prefix): it runs pytest itself, once per mutant, and takes a few minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PLACEMENT = "operator/phalanx/placement"


@dataclass(frozen=True)
class Mutant:
    name: str
    why: str
    module: str
    old: str
    new: str
    test: str  # pytest node id or "file::name"


MUTANTS = (
    Mutant(
        "split",
        "victim search: equal-cost sets no longer compared by their ids (the answer depends on search order)",
        "victim_search.py",
        "if best is not None and key == best.key and ids >= best.ids:",
        "if best is not None and key == best.key:",
        "test_placement_preemption.py::test_victims_are_the_cheapest_set_brute_force_finds",
    ),
    Mutant(
        "node-rule",
        "without levels the fullest nodes first again (the node not the lowest level)",
        "packing.py",
        "        return fewest_domains_order(nodes, capacity, need, self.lower, free, rank)",
        "        if not self.lower:\n"
        "            return nodes[self.scorer.order(self.score_free[:, nodes].T, nodes)]\n"
        "        return fewest_domains_order(nodes, capacity, need, self.lower, free, rank)",
        "test_placement_properties.py::test_inside_the_domain_the_fewest_nodes_the_same_rule_with_or_without_levels",
    ),
    Mutant(
        "auto",
        "auto probes today's free room instead of the cluster's nodes empty",
        "auto.py",
        "    empty = snapshot.empty()\n",
        "    empty = snapshot\n",
        "test_placement_auto.py::test_auto_is_required_at_the_narrowest_level_that_can_ever_hold_the_gang",
    ),
    Mutant(
        "spread",
        "victims' spread ignored: scattered victims as good as those completing a node or rack",
        "victim_search.py",
        "        key = (groups, pods, -starts, *self.spread, self.rank)",
        "        key = (groups, pods, -starts, *(0 for _ in self.spread), self.rank)",
        "test_placement_preemption.py::test_victims_are_the_cheapest_also_when_gains_do_not_add_up",
    ),
    Mutant(
        "paths",
        "victim domains by the key alone, not by level paths",
        "victim_domains.py",
        "column = snapshot.column(key) if depth is None else path_column(snapshot, levels, depth)",
        "column = snapshot.column(key)",
        "test_placement_preemption.py::test_victims_are_the_cheapest_set_brute_force_finds",
    ),
    Mutant(
        "partial",
        "VictimGroup(partial=False) ignored: such a group loses pods one by one",
        "victim_pool.py",
        'definitions[k].disruption == "single" and definitions[k].partial',
        'definitions[k].disruption == "single"',
        "test_placement_preemption.py::test_victims_are_the_cheapest_set_brute_force_finds",
    ),
    Mutant(
        "tree-victims",
        "tree victims checked by the per-node model only (a slice may span racks)",
        "preemption.py",
        "        return isinstance(decide_composite(inside[d].without(ids), root, explain=False), "
        "CompositeAdmit)",
        "        return True",
        "test_placement_preemption.py::test_tree_victims_are_the_cheapest_set_brute_force_finds",
    ),
    Mutant(
        "trusted-gap",
        "when the trusted model finds no set (it sees the preemptor fit), the check never searches",
        "preemption.py",
        "searches next; else the next level.\n                continue",
        "searches next; else the next level.\n                break",
        "test_placement_preemption.py::test_tree_victims_are_the_cheapest_set_brute_force_finds",
    ),
    Mutant(
        "preferred-leaves",
        "preferred leaves try their widest rung first (spread although the tree fits at their keys)",
        "composite_search.py",
        "        return t.rungs if self.relaxed else t.rungs[:1]",
        "        return t.rungs[::-1] if self.relaxed else t.rungs[-1:]",
        "test_placement_composite_properties.py::test_preferred_leaves_keep_their_key_when_the_tree_fits_so_else_go_wider",
    ),
    Mutant(
        "preferred-order",
        "relaxed preferred leaves decided at their own level (they take nodes finer leaves need)",
        "composite_search.py",
        "        return self.rungs(t)[-1].depth if self.relaxed else t.level",
        "        return t.level",
        "test_placement_composite_properties.py::test_preferred_leaves_keep_their_key_when_the_tree_fits_so_else_go_wider",
    ),
    Mutant(
        "reserve",
        "held nodes: the fullest now first among equals instead of those with the most room",
        "reservation.py",
        "    key[members] = -now[members].astype(np.float64)",
        "    key[members] = now[members].astype(np.float64)",
        "test_placement_reservation.py::test_reserve_follows_the_rule_and_keeps_its_guarantee",
    ),
    Mutant(
        "reserve-own-pods",
        "the gang's own running pods counted as if they would free",
        "reservation.py",
        "    empty = snapshot.empty(keep=required.bound_nodes)",
        "    empty = snapshot.empty()",
        "test_placement_reservation.py::test_running_pods_pin_the_domain_and_held_nodes_stay_full",
    ),
)


def run(mutant: Mutant) -> bool:
    """True when the test catches the mutant (fails on the broken copy)."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        shutil.copytree(ROOT / "operator", Path(tmp) / "operator")
        path = Path(tmp) / PLACEMENT / mutant.module
        text = path.read_text()
        if text.count(mutant.old) != 1:
            raise SystemExit(
                f"{mutant.name}: the text to break occurs {text.count(mutant.old)} times in {path}"
            )
        path.write_text(text.replace(mutant.old, mutant.new))
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "operator")}
        test = f"tests/unit/placement/{mutant.test}"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", test, "-q", "-x", "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.returncode != 0


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or m.name in argv]
    missed = 0
    for mutant in chosen:
        caught = run(mutant)
        missed += not caught
        print(f"{'caught' if caught else 'MISSED'}  {mutant.name:18} {mutant.why}", flush=True)
    print(f"{len(chosen) - missed} of {len(chosen)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
