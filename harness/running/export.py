"""`python -m harness export RESULTS [--format onnx|torchscript]`: hand each run's final policy on.

For every run folder with a `policy.pt` (written at the end of each complete run, `harness.running.policy`) it
writes, next to the run's records:

    policy.onnx / policy.torchscript.pt   observation (batch, obs_dim) float32 in, environment action
                                          (batch, act_dim) float32 out, within the action bounds
    policy.onnx.json (or ...pt.json)      what the file needs around it: input and output names and
                                          shapes, the action bounds, the environment (label, id or
                                          module:Class, kwargs), the spec, the normalization targets in
                                          force, and the export check below

and checks the written file in its own runtime (onnxruntime, or torch.jit.load) against the PyTorch
`PolicyModule` on 1,000 observations that the environment visits under uniform random actions,
printing the largest absolute difference of any action component; above 1e-5 the command exits 1.
The policy takes raw observations: the learner normalizes none.

The ONNX graph is written with `onnx.helper` from the module's own layers (MatMul, Add, Relu, Slice,
Tanh, and the affine map onto the bounds): torch 2.13's TorchScript-based ONNX exporter is deprecated
and its dynamo exporter needs onnxscript. TorchScript itself is deprecated in torch 2.13 (its warning is
silenced here); prefer ONNX.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import records
from .envs import registered_ref
from .policy import POLICY_FILE, PolicyError, PolicyModule, load_policy_state

INSTALL_HINT = 'ONNX export needs onnx and onnxruntime: pip install -e ".[export]"'
CHECK_OBSERVATIONS = 1000
TOLERANCE = 1e-5  # largest absolute action difference an export may show against PyTorch
ONNX_OPSET = 17
ONNX_IR_VERSION = 8  # read by every onnxruntime since 1.10
INPUT_NAME, OUTPUT_NAME = "observation", "action"


class ExportError(ValueError):
    """Bad input to the export (one-line message): no policies, a missing package."""


def onnx_available() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


# --- formats: write a file, then run it ----------------------------------------------------------


def _write_onnx(module: PolicyModule, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.ascontiguousarray(value), name=name)

    init, nodes = [], []
    x = INPUT_NAME
    for i, layer in enumerate(module.layers):
        w = layer.weight.detach().numpy().T.astype(np.float32)  # (in, out): x @ w
        b = layer.bias.detach().numpy().astype(np.float32)
        init += [const(f"W{i}", w), const(f"b{i}", b)]
        nodes += [
            helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}_mm"]),
            helper.make_node("Add", [f"h{i}_mm", f"b{i}"], [f"h{i}"]),
        ]
        x = f"h{i}"
        if i < len(module.layers) - 1:
            nodes.append(helper.make_node("Relu", [x], [f"h{i}_relu"]))
            x = f"h{i}_relu"
    init += [
        const("slice_starts", np.array([0], np.int64)),
        const("slice_ends", np.array([module.act_dim], np.int64)),
        const("slice_axes", np.array([1], np.int64)),
        const("one", np.array([1.0], np.float32)),
        const("half_range", module.half_range.numpy()),
        const("low", module.low.numpy()),
    ]
    nodes += [
        helper.make_node("Slice", [x, "slice_starts", "slice_ends", "slice_axes"], ["mu"]),
        helper.make_node("Tanh", ["mu"], ["mean_action"]),
        helper.make_node("Add", ["mean_action", "one"], ["shifted"]),
        helper.make_node("Mul", ["shifted", "half_range"], ["scaled"]),
        helper.make_node("Add", ["scaled", "low"], [OUTPUT_NAME]),
    ]
    obs_dim = module.layers[0].in_features
    graph = helper.make_graph(
        nodes,
        "sacbench_policy",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", obs_dim])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", module.act_dim])],
        init,
    )
    model = helper.make_model(graph, producer_name="sacbench", opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    records.atomic_write_bytes(path, model.SerializeToString())


def _run_onnx(path: Path, obs: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: obs})[0]


def _torchscript_quietly(fn: Callable, *args):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning)
        return fn(*args)


def _write_torchscript(module: PolicyModule, path: Path) -> None:
    import io

    scripted = _torchscript_quietly(torch.jit.script, module)
    buffer = io.BytesIO()
    _torchscript_quietly(torch.jit.save, scripted, buffer)
    records.atomic_write_bytes(path, buffer.getvalue())


def _run_torchscript(path: Path, obs: np.ndarray) -> np.ndarray:
    loaded = _torchscript_quietly(torch.jit.load, str(path), "cpu")
    with torch.no_grad():
        return loaded(torch.as_tensor(obs)).numpy()


@dataclass(frozen=True)
class Format:
    filename: str
    write: Callable[[PolicyModule, Path], None]
    run: Callable[[Path, np.ndarray], np.ndarray]
    runtime: str


FORMATS: dict[str, Format] = {
    "onnx": Format("policy.onnx", _write_onnx, _run_onnx, "onnxruntime"),
    "torchscript": Format("policy.torchscript.pt", _write_torchscript, _run_torchscript, "torch.jit.load"),
}


# --- observations to check on --------------------------------------------------------------------


def check_observations(
    config: dict, obs_dim: int, n: int = CHECK_OBSERVATIONS, seed: int = 0
) -> tuple[np.ndarray, str]:
    """`n` observations (n, obs_dim) float32 and where they came from: the run's environment under
    uniform random actions (reset with seeds seed, seed+1, ... as episodes end) when it is a registered
    Gymnasium id, or, when it is not (a user's `module:attr` is never imported from a results folder)
    or cannot be made here, standard normal draws."""
    entry = config.get("env_entry") or config.get("env")
    ref = registered_ref(entry, config.get("env_kwargs"))
    rng = np.random.default_rng(seed)
    if ref is None:  # never import or call what a results folder names
        return (
            rng.standard_normal((n, obs_dim)).astype(np.float32),
            f"standard normal draws ({entry!r} is not a registered Gymnasium id; "
            "an environment named in a results folder is never imported)",
        )
    try:
        env = ref.make()
    except Exception as exc:  # e.g. recorded kwargs this Gymnasium version rejects: still check the file
        return (
            rng.standard_normal((n, obs_dim)).astype(np.float32),
            f"standard normal draws ({entry} could not be made: {type(exc).__name__})",
        )
    try:
        env.action_space.seed(seed)
        out, episode = [], 0
        obs, _ = env.reset(seed=seed)
        while len(out) < n:
            out.append(np.asarray(obs, dtype=np.float32).reshape(-1))
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                episode += 1
                obs, _ = env.reset(seed=seed + episode)
        return np.stack(out), f"{entry} under uniform random actions (reset seeds from {seed})"
    finally:
        env.close()


# --- the command ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    run: str  # run folder, relative to the results folder
    path: Path  # the written policy file
    max_abs_diff: float
    source: str = ""  # where the check's observations came from

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= TOLERANCE


def policy_files(results_dir: Path) -> list[Path]:
    return sorted(Path(results_dir).glob(f"runs/*/*/seed_*/{POLICY_FILE}"))


def export_run(policy_path: Path, fmt: str, results_dir: Path) -> Exported:
    """Export one run's policy.pt in format `fmt`, write its description (`<file>.json`), and check the file."""
    state = load_policy_state(policy_path)
    module = PolicyModule.from_state(state)
    spec = FORMATS[fmt]
    run_dir = policy_path.parent
    out = run_dir / spec.filename
    spec.write(module, out)
    config = state["config"]
    obs, source = check_observations(config, state["obs_dim"])
    with torch.no_grad():
        reference = module(torch.as_tensor(obs)).numpy()
    actions = spec.run(out, obs)
    diff = float(np.max(np.abs(actions.astype(np.float64) - reference.astype(np.float64))))
    records.write_json(
        run_dir / f"{spec.filename}.json",
        {
            "file": spec.filename,
            "format": fmt,
            "input": {
                "name": INPUT_NAME,
                "shape": ["batch", state["obs_dim"]],
                "dtype": "float32",
                "meaning": "raw environment observations (no normalization)",
            },
            "output": {
                "name": OUTPUT_NAME,
                "shape": ["batch", state["act_dim"]],
                "dtype": "float32",
                "meaning": "deterministic action low + (tanh(mean) + 1) * (high - low) / 2, within the bounds",
            },
            "action_low": state["action_low"],
            "action_high": state["action_high"],
            "env_steps": state["env_steps"],
            **{
                k: config.get(k)
                for k in (
                    "env",
                    "env_entry",
                    "env_kwargs",
                    "variant",
                    "description",
                    "seed",
                    "spec",
                    "normalization",
                    "git_commit",
                )
            },
            "check": {
                "runtime": spec.runtime,
                "observations": int(obs.shape[0]),
                "source": source,
                "max_abs_diff_vs_pytorch": diff,
                "tolerance": TOLERANCE,
            },
        },
    )
    return Exported(run_dir.relative_to(results_dir).as_posix(), out, diff, source)


def export_command(results_dir: Path, fmt: str, log=print) -> int:
    """CLI body: export every run's policy; 0 when every check passes, 1 otherwise. Raises ExportError
    for bad input (no results folder, no policy, onnx missing)."""
    results_dir = Path(results_dir)
    problem = records.not_a_results_folder(results_dir)
    if problem:
        raise ExportError(f"export: results folder {results_dir} {problem}")
    if fmt == "onnx" and not onnx_available():
        raise ExportError(INSTALL_HINT)
    paths = policy_files(results_dir)
    if not paths:
        raise ExportError(
            f"export: no run under {results_dir} has a final policy ({POLICY_FILE}); "
            "complete runs write one at their end"
        )
    failed = 0
    for path in paths:
        try:
            done = export_run(path, fmt, results_dir)
        except PolicyError as exc:
            log(f"skipped {path.parent.relative_to(results_dir).as_posix()}: {exc}")
            failed += 1
            continue
        verdict = "ok" if done.ok else f"ABOVE {TOLERANCE:g}"
        log(
            f"{done.run}: {done.path.name}, max abs difference vs PyTorch on {CHECK_OBSERVATIONS:,} observations "
            f"{done.max_abs_diff:.3g} ({verdict})"
        )
        if done.source.startswith("standard normal"):
            log(f"{done.run}: checked on {done.source}")
        failed += not done.ok
    log(f"export: {len(paths) - failed} of {len(paths)} policies written and checked ({fmt})")
    return 0 if failed == 0 else 1
