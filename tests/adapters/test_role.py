"""An adapter's role (evorag_core/adapters/role.py): a round on answer pairs registers a reader adapter, and wherever
it runs (the gate's evaluation, the hot-swap watcher, the studio's live policy, `evorag eval --adapter NAME`) it
reads the answers only, the decisions on the base model. Real SQLite store, the tiny 2-layer Llama, real LoRA
weights (every B matrix noisy, so that an adapter visibly changes what the model does)."""
from __future__ import annotations

import shutil

import pytest
import torch

from evorag_core.adapters.files import read_adapter_meta
from evorag_core.adapters.registry import activate, register_verified
from evorag_core.adapters.role import applied, applied_spec, role_for_source
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import ConfigError
from evorag_core.lm.loading import base_model_id
from evorag_core.promotion.evaluate import Side, evaluate_side
from evorag_core.store import NewPair, open_store
from tests.lora_adapters import random_adapter
from training.worker import WorkerOptions, process_one

PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture()
def world(tmp_path, tiny_demo):
    """(config, home, store, base id, the noisy adapter's folder registered twice: "as-policy" and "as-reader")."""
    torch.set_num_threads(1)
    cfg = apply_overrides(load_config(), {
        "policy.model": str(tiny_demo), "policy.device": "cpu", "policy.threads": 1, "train.max_length": 96,
        "train.lr": 1e-3, "train.batch_size": 2, "promotion.questions": "0:8", "promotion.min_n": 5})
    store = open_store(f"sqlite:///{tmp_path / 'evorag.db'}")
    base_id = base_model_id(str(tiny_demo), tmp_path)
    folder = random_adapter(tiny_demo, tmp_path / "adapters" / "noisy", seed=3, base_id=base_id, scale=0.5)
    for name, role in (("as-policy", "policy"), ("as-reader", "reader")):
        register_verified(store, name, folder, base_model_id=base_id, checksum=read_adapter_meta(folder)["sha256"],
                          role=role)
    yield cfg, tmp_path, store, base_id, folder
    store.close()


def _decisions(result) -> list[tuple[str, str]]:
    """The episode's actions with their arguments, except the answer's text (what the policy decided)."""
    return [(a.get("action", ""), "" if a.get("action") == "ANSWER" else str(a.get("argument", a.get("query", ""))))
            for a in result.trace]


def test_applied_gives_a_reader_adapter_to_the_reader_and_a_policy_adapter_to_the_policy(tmp_path):
    cfg = load_config()
    assert applied(cfg, "/a/r1", "policy") == (cfg, "/a/r1")
    as_reader, policy = applied(cfg, "/a/r1", "reader")
    assert policy is None and as_reader.answer.adapter == "/a/r1" and as_reader.policy == cfg.policy
    assert applied(cfg, None, "reader") == (cfg, None)
    with pytest.raises(ConfigError, match="role 'judge'"):
        applied(cfg, "/a/r1", "judge")
    assert (role_for_source("answer"), role_for_source("rollout"), role_for_source(None)) == (
        "reader", "policy", "policy")


def test_the_gate_evaluates_a_reader_adapter_with_the_base_models_decisions(world):
    """The same weights registered in both roles: as the policy's they change the agent's decisions; as the
    reader's every decision is the base model's and only answers change. The roles are separate cache entries."""
    cfg, home, store, base_id, _ = world
    sides = {name: evaluate_side(store, cfg, home, Side(store.get_adapter(name) if name != "base" else None, base_id))
             for name in ("base", "as-policy", "as-reader")}
    base, policy, reader = (list(sides[n].results) for n in ("base", "as-policy", "as-reader"))
    assert [_decisions(r) for r in reader] == [_decisions(r) for r in base]
    assert any(_decisions(p) != _decisions(b) for p, b in zip(policy, base))
    assert any(r.prediction != b.prediction for r, b in zip(reader, base))  # the reader did read with it
    keys = {Side(store.get_adapter(n), base_id).weights_key for n in ("as-policy", "as-reader")}
    assert len(keys) == 2 and all(sides[n].cached == 0 for n in sides)


def test_a_round_on_answer_pairs_registers_a_reader_and_other_rounds_a_policy_adapter(world):
    cfg, home, store, _, _ = world
    store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"town {i} founder", f"nobody {i}",
                             source="answer") for i in range(4)])
    store.add_pairs([NewPair(PROMPT.format(f"where is town {i}"), f"SEARCH: town {i}", f"ANSWER: nowhere {i}")
                     for i in range(4)])
    store.enqueue_round("dpo", {"pairs": 4, "source": "answer"})
    store.enqueue_round("dpo", {"pairs": 4})
    for _ in range(2):  # the two rounds, in queue order (the evaluation jobs they queue come after)
        done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=600))
        assert done.objective == "dpo" and done.status == "succeeded", done.error
    roles = {a.round_id: a.role for a in store.list_adapters() if a.round_id is not None}
    rounds = {r.id: r.config.get("source") for r in store.list_rounds() if r.objective == "dpo"}
    assert {rounds[rid]: role for rid, role in roles.items()} == {"answer": "reader", None: "policy"}


def test_a_live_reader_adapter_is_hot_swapped_into_the_reader_not_the_policy(world):
    """The watcher follows a live reader adapter: the backend's policy runs the base model, the episode's reader
    reads with the adapter; a policy adapter going live replaces it, and the base model again clears both."""
    from evorag_core.adapters.watcher import AdapterWatcher, PinnedPolicy
    from evorag_core.lm.backends import policy_backend
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.types import Question

    cfg, home, store, base_id, _ = world
    backend = policy_backend(cfg.policy, home)
    watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
    pinned = PinnedPolicy(LMPolicy(backend, cfg.policy, cfg.answer), watcher)
    question = Question(id="q", dataset="demo", question="who founded town 1", answers=("x",))

    activate(store, "as-reader", base_id)
    pinned.begin(question)
    assert pinned.adapter is None and backend.active_adapter is None
    assert watcher.reader is not None and watcher.reader in backend.list_adapters()
    assert pinned.lm.reader.adapter == watcher.reader

    activate(store, "as-policy", base_id)
    pinned.begin(question)
    assert pinned.adapter == "as-policy" and watcher.reader is None and pinned.lm.reader.adapter is None

    activate(store, "as-reader", base_id)
    store.deactivate_adapters(who="admin")
    pinned.begin(question)
    assert pinned.adapter is None and watcher.reader is None and pinned.lm.reader.adapter is None


def test_the_studio_runs_a_live_reader_adapter_as_the_reader(world):
    from app.common.policies import LIVE, PolicyProvider

    cfg, home, store, base_id, _ = world
    activate(store, "as-reader", base_id)
    provider = PolicyProvider(cfg, home)
    live = provider.make(LIVE, adapter_lookup=lambda name: store.active_adapter() if name is None
                         else store.get_adapter(name))
    assert live.adapter == "as-reader" and "reader adapter as-reader" in live.label
    assert live.policy.adapter is None  # the decisions run on the base model
    assert live.policy.lm.reader.adapter is not None and live.policy.lm.reader.adapter in provider._backend.list_adapters()
    assert provider.pending_load(LIVE, lambda name: store.active_adapter()) == ""
    backend, name = provider.backend_for(LIVE, lambda name: store.active_adapter())
    assert name is None  # ARENA's generator: a reader adapter is not a generator's


def test_eval_adapter_by_name_runs_a_registered_reader_as_the_reader(world, monkeypatch):
    cfg, home, store, _, folder = world
    monkeypatch.setenv("EVORAG_DB_URL", f"sqlite:///{home / 'evorag.db'}")
    as_reader, policy = applied_spec(cfg, "as-reader", home)
    assert policy is None and as_reader.answer.adapter == str(folder)
    assert applied_spec(cfg, "as-policy", home) == (cfg, "as-policy")
    assert applied_spec(cfg, str(folder), home) == (cfg, str(folder))  # a folder by path: the policy's
    assert applied_spec(cfg, None, home) == (cfg, None)


def test_rollout_adapter_by_name_runs_it_in_its_role_and_checks_the_registry(world, capsys):
    """`evorag rollout --adapter NAME`: a registered reader rolls out as the reader (its episodes' policy says so,
    so `--resume` does not take the base model's episodes for its own); a policy adapter as the policy's, its
    folder checked against the registry's checksum (replaced since registration: refused, nothing stored)."""
    from evorag_core.cli.main import main as cli_main
    from tests.paths import DEMO

    cfg, home, store, base_id, folder = world
    db = str(store.engine.url)
    argv = ["rollout", "--data", str(DEMO), "--home", str(home), "--db", db, "--limit", "1", "--threads", "1",
            "--json", "--set", f"policy.model={cfg.policy.model}", "--set", "policy.device=cpu",
            "--set", "rollout.t_max=2", "--set", "rollout.siblings=2", "--set", "rollout.max_states=1",
            "--set", "policy.max_query_tokens=4", "--set", "policy.max_answer_tokens=4"]
    for adapter in (None, "as-reader", "as-policy"):
        assert cli_main(argv + (["--adapter", adapter] if adapter else []) + ["--resume"]) == 0
    policies = {e.policy for e in store.list_episodes(limit=None)}
    assert policies == {f"lm:{base_id}", f"lm:{base_id}+reader:noisy", f"lm:{base_id}+noisy"}
    capsys.readouterr()
    other = random_adapter(cfg.policy.model, home / "other", seed=4, base_id=base_id)
    shutil.copytree(other, folder, dirs_exist_ok=True)  # other weights in the registered folder
    assert cli_main(argv + ["--adapter", "as-policy"]) == 2
    assert "records other weights than the registry" in capsys.readouterr().err
    assert {e.policy for e in store.list_episodes(limit=None)} == policies
