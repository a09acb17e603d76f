"""`evorag run`: one episode on one question, printed step by step (or as JSON)."""
from __future__ import annotations

import argparse
from pathlib import Path

from evorag_core.env.actions import action_to_dict
from evorag_core.errors import ConfigError
from evorag_core.methods.base import run_episode
from evorag_core.methods.oracle import OraclePolicy
from evorag_core.methods.script import ScriptPolicy, load_script
from evorag_core.cli.common import add_answerer, add_common, config_from_args, print_json, runtime_from_args

__all__ = ["add_parser", "main", "episode_json"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="run one episode on one question")
    add_common(p)
    p.add_argument("--question", required=True, help="question id in the data file")
    p.add_argument("--script", type=Path, default=None, help="JSON list of actions to replay")
    p.add_argument("--policy", choices=["script", "oracle", "lm"], default=None,
                   help="script (replay --script), oracle (reads gold: an upper bound) or lm (the agent); "
                        "default: script if --script else oracle")
    p.add_argument("--adapter", default=None, help="LoRA adapter (store name or folder) for --policy lm")
    add_answerer(p)
    p.add_argument("--siblings", type=int, default=0, help="--policy lm: also sample K candidates at each state")
    p.add_argument("--stage", choices=["discovery", "refinement"], default=None)
    p.add_argument("--schedule", choices=["time-dynamic", "two-stage", "no-reward"], default=None)
    p.add_argument("--preset", default=None, help="reward combination: full, best2, best3, exploration-heavy, efficiency-heavy")
    p.add_argument("--corpus", choices=["pooled", "per-question"], default=None)
    p.add_argument("--k", type=int, default=None, help="passages per SEARCH")
    p.add_argument("--t-max", type=int, default=None)
    return p


def make_policy(args: argparse.Namespace, rt):
    policy = args.policy or ("script" if args.script else "oracle")
    if policy == "lm":
        from evorag_core.methods.agent import AgentPolicy
        from evorag_core.lm.backends import load_backend
        from evorag_core.policy.agent import LMPolicy

        backend, adapter = load_backend(rt, args.adapter)
        return _WithSiblings(AgentPolicy(LMPolicy(backend, rt.cfg.policy, rt.cfg.answer), adapter), args.siblings)
    if policy == "script":
        if args.script is None:
            raise ConfigError("--policy script needs --script FILE")
        return ScriptPolicy(load_script(args.script))
    return OraclePolicy()


class _WithSiblings:
    """Adds K sampled sibling candidates (action, completion, log-prob) to each step's info."""

    def __init__(self, inner, k: int):
        self.inner, self.k = inner, k
        self.name, self.label = inner.name, inner.label

    def begin(self, question) -> None:
        self.inner.begin(question)

    def act(self, view):
        action, info = self.inner.act(view)
        if self.k > 0:
            cands = self.inner.lm.candidates(view, self.k)
            info = {**info, "candidates": [
                {**action_to_dict(c.action), "completion": c.completion, "logprob": c.logprob} for c in cands
            ]}
        return action, info


def episode_json(record) -> dict:
    """The CLI contract: {question_id, answer, steps: [{t, action, query|answer, passages, signals, weights, reward}], return}."""
    steps = []
    for s in record.steps:
        row = {"t": s.t, **action_to_dict(s.action), "passages": list(s.passages)}
        row.update(signals=dict(s.signals), weights=dict(s.weights), reward=s.reward)
        if s.verdict is not None:
            row["verdict"] = s.verdict.__dict__
        if s.info:
            row["info"] = dict(s.info)
        steps.append(row)
    return {
        "question_id": record.question_id,
        "episode_id": record.episode_id,
        "answer": record.answer,
        "refused": record.refused,
        "truncated": record.truncated,
        "stage": record.stage,
        "steps": steps,
        "return": record.total_return,
    }


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(
        args,
        {
            "reward.stage": args.stage,
            "reward.schedule": args.schedule,
            "reward.preset": args.preset,
            "env.corpus": args.corpus,
            "env.top_k": args.k,
            "env.t_max": args.t_max,
        },
    )
    rt = runtime_from_args(args, cfg)
    question = rt.dataset.get(args.question) if args.question in {q.id for q in rt.dataset.questions} else None
    if question is None:
        raise ConfigError(f"question id {args.question!r} is not in {args.data}")
    policy = make_policy(args, rt)
    env = rt.make_env(question)
    record = run_episode(env, policy, question)
    out = episode_json(record)
    if getattr(policy, "label", None):
        out["label"] = policy.label
    if args.json:
        print_json(out)
        return 0
    print(f"Q [{question.id}] {question.question}")
    if out.get("label"):
        print(f"policy: {out['label']}")
    for s in record.steps:
        act = action_to_dict(s.action)
        arg = act.get("query") or act.get("answer") or ""
        print(f"t={s.t:2d} {act['action']:<9} {arg[:60]:<60} R={s.reward:+.3f}")
        for pid in s.passages:
            p = env.passage(pid)
            mark = "*" if pid in record.gold_pids else " "
            print(f"      {mark} {p.title[:70]}")
        sig = " ".join(f"{k}={v:+.2f}" for k, v in s.signals.items())
        print(f"      signals: {sig}")
    print(f"answer: {record.answer!r}  gold: {list(question.answers)}  return: {record.total_return:+.3f}")
    return 0
