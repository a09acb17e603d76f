"""`evorag ablate` end to end on the demo data with a tiny random Llama: rollouts stored once, re-scored per variant,
one DPO step per variant, evaluation of the base and each adapter on disjoint questions, the table, JSON and figure;
interrupted after the first variant, the same command continues where it stopped (nothing is rolled out, trained or
evaluated twice)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evorag_core.cli.main import main as cli_main
from evorag_core.config import apply_overrides, load_config
from evorag_core.env.scheduler import PAPER_TABLE
from evorag_core.store import open_store
from tests.paths import DEMO
from training.ablation.pipeline import AblationPlan, load_state, run_ablation
from training.ablation.variants import ablation

SETTINGS = {
    "policy.device": "cpu", "policy.threads": 1, "train.max_length": 160, "train.batch_size": 2, "env.t_max": 4,
    "rollout.t_max": 4, "policy.max_query_tokens": 6, "policy.max_answer_tokens": 4, "policy.passage_chars": 160,
    "env.corpus": "per-question",
}
# training questions demo-001..003; evaluation demo-041..044 (demo-043 is one of the 12 unanswerable)
ARGS = ["--train", "0:3", "--eval", "40:44", "--max-steps", "1", "--eval-t-max", "4", "--resamples", "200",
        "--variants", "two-stage"]


class Interrupt(Exception):
    pass


@pytest.mark.slow
def test_ablate_writes_table_json_figure_and_resumes(tiny, tmp_path, capsys):
    torch.set_num_threads(1)
    home, out = tmp_path / "home", tmp_path / "out"
    overrides = {**SETTINGS, "policy.model": str(tiny)}
    cfg = apply_overrides(load_config(), overrides)
    chosen = ablation("schedules", PAPER_TABLE).only(("two-stage",))
    plan = AblationPlan(name="schedules", variants=chosen.variants, reference="time-dynamic", data=DEMO.resolve(),
                        train=(0, 3), eval=(40, 44), out=out.resolve(), max_steps=1, eval_t_max=4)

    def stop_after_first(name, record):
        raise Interrupt(name)

    with pytest.raises(Interrupt, match="time-dynamic"):
        run_ablation(plan, cfg, home, on_variant=stop_after_first)
    first = load_state(out)
    assert set(first["variants"]) == {"time-dynamic"} and first["variants"]["time-dynamic"]["eval"]["n"] == 4
    assert first["variants"]["time-dynamic"]["round"]["status"] == "succeeded"
    adapter = Path(first["variants"]["time-dynamic"]["round"]["adapter_path"])
    stamp = (adapter / "adapter_model.safetensors").stat().st_mtime_ns
    base_lines = (out / "eval" / "base.jsonl").read_text()

    argv = ["ablate", "schedules", "--home", str(home), "--out", str(out), "--data", str(DEMO), *ARGS,
            *[a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    state = load_state(out)
    # resumed: the finished variant, the rollouts and the base evaluation are reused, the second variant is added
    assert state["variants"]["time-dynamic"] == first["variants"]["time-dynamic"]
    assert (adapter / "adapter_model.safetensors").stat().st_mtime_ns == stamp
    assert (out / "eval" / "base.jsonl").read_text() == base_lines
    with open_store(state["rollouts"]["store"]) as store:
        assert len(store.list_episodes(limit=None)) == 3
    two = state["variants"]["two-stage"]
    assert two["store"]["episodes"] == 3 and two["round"]["status"] == "succeeded" and two["eval"]["n"] == 4
    # only the weights differ: the two variants' stores hold the same trajectories with other returns
    with open_store(f"sqlite:///{out / 'variants' / 'two-stage' / 'store.db'}") as a, \
            open_store(f"sqlite:///{out / 'variants' / 'time-dynamic' / 'store.db'}") as b:
        ea, eb = (sorted((s.get_episode(e.id) for e in s.list_episodes(limit=None)), key=lambda e: e.question_id)
                  for s in (a, b))
        assert [[(st.action, st.argument, st.signals) for st in e.steps] for e in ea] == \
               [[(st.action, st.argument, st.signals) for st in e.steps] for e in eb]
        assert [e.schedule for e in ea] == ["two-stage"] * 3 and [e.schedule for e in eb] == ["time-dynamic"] * 3
        assert [[st.weights for st in e.steps] for e in ea] != [[st.weights for st in e.steps] for e in eb]

    report = json.loads((out / "ablation.json").read_text())
    names = [r["name"] for r in report["rows"]]
    assert names == ["base", "time-dynamic", "two-stage"]
    ref = next(r for r in report["rows"] if r["name"] == "time-dynamic")
    assert ref["p"] is None and ref["refusal_accuracy"] is not None
    base = report["rows"][0]
    assert set(base["p"]) == {"em", "f1", "avg_steps", "support_recall", "refusal_accuracy"}
    md = (out / "ablation.md").read_text()
    assert "| **time-dynamic** (reference) |" in md and "Refusal acc." in md and "| base (no training) |" in md
    minutes = report["minutes"]
    assert set(minutes["rounds"]) == {"time-dynamic", "two-stage"} and set(minutes["evaluations"]) == \
        {"base", "time-dynamic", "two-stage"}
    assert all(v > 0 for v in [*minutes["rounds"].values(), *minutes["evaluations"].values()])
    assert "Minutes: rollouts" in md and minutes["total"] >= sum(minutes["rounds"].values())
    assert md.split("\n", 2)[2] in printed
    assert (out / "ablation.html").stat().st_size > 10_000
    assert (out / "ablation.png").is_file() or "png_error" in report["files"]
    # the same command naming another variant extends the run by that row; nothing finished is redone
    capsys.readouterr()
    more = [a if a != "two-stage" else "no-reward" for a in argv]
    assert cli_main(more) == 0
    extended = load_state(out)
    assert [v["name"] for v in extended["plan"]["variants"]] == ["time-dynamic", "two-stage", "no-reward"]
    for kept in ("rollouts", "base"):
        assert extended[kept] == state[kept]
    for name in ("time-dynamic", "two-stage"):
        assert extended["variants"][name] == state["variants"][name]
    assert extended["variants"]["no-reward"]["eval"]["n"] == 4
    assert [r["name"] for r in json.loads((out / "ablation.json").read_text())["rows"]] == \
        ["base", "time-dynamic", "two-stage", "no-reward"]
    # the same folder with another setting is refused, not mixed
    assert cli_main([*argv, "--set", "rollout.siblings=2"]) == 2
    assert "different config" in capsys.readouterr().err


def test_a_variant_held_with_other_weights_is_refused(tmp_path):
    """Extending a run keeps the held variants' order and refuses a same-named variant defined differently."""
    from evorag_core.errors import ConfigError
    from training.ablation.pipeline import _merged_variants

    td, nr = {"name": "time-dynamic", "table": [1]}, {"name": "no-reward", "table": [1]}
    assert _merged_variants(tmp_path, [td], [nr, td]) == [td, nr]
    with pytest.raises(ConfigError, match="'time-dynamic' with other weights"):
        _merged_variants(tmp_path, [td], [{"name": "time-dynamic", "table": [2]}])


@pytest.mark.slow
def test_ablate_on_two_worker_processes_stores_and_evaluates_as_one_process(tiny, tmp_path):
    """`workers=2`: the rollouts on the executors' process pool, the evaluations on an `EvalPool` (one model load per
    worker for the base and the adapter): the same stored episodes and pairs, the same per-question results in the
    same order as in this process, and the same table row."""
    torch.set_num_threads(1)
    cfg = apply_overrides(load_config(), {**SETTINGS, "policy.model": str(tiny)})
    chosen = ablation("schedules", PAPER_TABLE).only(())
    runs = {}
    for workers in (1, 2):
        out = (tmp_path / f"out{workers}").resolve()
        plan = AblationPlan(name="schedules", variants=chosen.variants, reference="time-dynamic",
                            data=DEMO.resolve(), train=(0, 3), eval=(40, 44), out=out, max_steps=1, eval_t_max=4)
        state = run_ablation(plan, cfg, tmp_path / "home", workers=workers)
        with open_store(state["rollouts"]["store"]) as store:
            episodes = [store.get_episode(e.id) for e in sorted(store.list_episodes(limit=None), key=lambda e: e.id)]
            stored = ([(e.question_id, e.total_return, e.answer, [(s.action, s.argument) for s in e.steps])
                       for e in episodes],
                      [(p.prompt, p.chosen, p.rejected, round(p.margin, 9))
                       for p in sorted(store.list_pairs(limit=None), key=lambda p: p.id)])
        evals = {name: [(r["question_id"], r["prediction"], r["steps"], r["trace"])
                        for r in map(json.loads, (out / "eval" / f"{name}.jsonl").read_text().splitlines())]
                 for name in ("base", "time-dynamic")}
        summary = {k: state["variants"]["time-dynamic"]["eval"][k] for k in ("n", "em", "f1", "avg_steps")}
        runs[workers] = stored, evals, summary
    assert len(runs[1][0][0]) == 3 and runs[1][0][1]  # three rollout episodes, some pairs
    assert [q for q, *_ in runs[1][1]["base"]] == [q for q, *_ in runs[2][1]["base"]] and len(runs[1][1]["base"]) == 4
    assert runs[2] == runs[1]


@pytest.mark.slow
def test_rows_of_another_run_with_the_same_weights_are_reused_not_recomputed(tiny, tmp_path, capsys):
    """`--rows-from`: a presets run on a schedules run's rollouts takes that run's base row and its time-dynamic row
    as Full (the same weights): nothing is trained or evaluated again, the lines are copied, the table stands on
    its own; with another step budget nothing is reused (control)."""
    torch.set_num_threads(1)
    home = tmp_path / "home"
    overrides = {**SETTINGS, "policy.model": str(tiny)}
    sets = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
    common = ["--home", str(home), "--data", str(DEMO), "--train", "0:3", "--eval", "40:44", "--eval-t-max", "4",
              "--resamples", "200", *sets]
    first = (tmp_path / "schedules").resolve()
    assert cli_main(["ablate", "schedules", "--variants", "", "--out", str(first), "--max-steps", "1", *common]) == 0
    held = load_state(first)
    capsys.readouterr()

    second = (tmp_path / "presets").resolve()
    assert cli_main(["ablate", "presets", "--variants", "", "--out", str(second), "--max-steps", "1",
                     "--rows-from", str(first), *common]) == 0
    assert "(reused: time-dynamic of" in capsys.readouterr().err
    state = load_state(second)
    assert state["plan"]["rollouts_from"] == held["rollouts"]["store"] == state["rollouts"]["store"]
    full, td = state["variants"]["full"], held["variants"]["time-dynamic"]
    assert full["reused_from"] == {"run": str(first), "variant": "time-dynamic"}
    assert full["round"] == td["round"] and full["store"] == td["store"]
    assert not (second / "variants").exists()  # no store re-scored, no round trained
    for name, source in (("base", held["base"]), ("full", td["eval"])):
        mine = state["base"] if name == "base" else full["eval"]
        assert mine["results"] == str(second / "eval" / f"{name}.jsonl") and mine["reused_from"] == str(first)
        assert Path(mine["results"]).read_text() == Path(source["results"]).read_text()
        assert {k: v for k, v in mine.items() if k not in ("results", "reused_from")} == \
               {k: v for k, v in source.items() if k != "results"}
    report = json.loads((second / "ablation.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["base", "full"] and report["minutes"]["reused"] == ["base", "full"]
    assert report["minutes"]["rounds"] == {"full": None}
    assert "Reused from another run: base, full." in (second / "ablation.md").read_text()

    # control: another step budget is another experiment; nothing of the first run is taken
    third = (tmp_path / "presets3").resolve()
    assert cli_main(["ablate", "presets", "--variants", "", "--out", str(third), "--max-steps", "2",
                     "--rows-from", str(first), *common]) == 0
    other = load_state(third)
    assert "reused_from" not in other["base"] and "reused_from" not in other["variants"]["full"]
    assert other["variants"]["full"]["round"]["status"] == "succeeded" and (third / "variants" / "full").is_dir()
