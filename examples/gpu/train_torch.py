#!/usr/bin/env python3
"""A small real PyTorch training run that the GPU agent can drive as its rl command.

It takes prime-rl's command line (`@ rl.toml --output-dir DIR --run.name NAME [--resume]`)
and writes prime-rl's layout (DIR/NAME/metrics.jsonl, logs/attempt_N with logs/latest,
checkpoints/step_N/{trainer,orchestrator}/), so everything the agent does with prime-rl —
streaming metrics and logs, committing checkpoints, resuming — is exercised on a real GPU
without vLLM or an environment. It trains a small MLP to fit a fixed random function; the
"reward" is 1 / (1 + loss). SIGTERM finishes the current step and exits 143.

    gpuagent --rl-command "python3 examples/gpu/train_torch.py @ {config} --output-dir {output_dir} --run.name {run_name}" --install-command ""
"""
import argparse
import json
import os
import signal
import sys
import time
import tomllib

import torch


def main() -> int:
    argv = sys.argv[1:]
    configs = []
    while "@" in argv:
        i = argv.index("@")
        configs.append(argv[i + 1])
        del argv[i : i + 2]
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", default="outputs")
    p.add_argument("--run.name", dest="run_name", default="run")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--max-steps", type=int, default=0)
    args = p.parse_args(argv)
    cfg = {}
    for c in configs:
        with open(c, "rb") as f:
            cfg.update(tomllib.load(f))
    max_steps = args.max_steps or int(cfg.get("max_steps", 100))
    interval = int(cfg.get("ckpt", {}).get("interval", 0))
    lr = float(cfg.get("trainer", {}).get("optim", {}).get("lr", 1e-3))

    run = os.path.join(args.output_dir, args.run_name)
    ckpts = os.path.join(run, "checkpoints")
    os.makedirs(ckpts, exist_ok=True)
    logs = os.path.join(run, "logs")
    os.makedirs(logs, exist_ok=True)
    attempt = 1 + max([int(n.split("_")[1]) for n in os.listdir(logs) if n.startswith("attempt_")] or [0])
    os.makedirs(os.path.join(logs, f"attempt_{attempt}"))
    latest = os.path.join(logs, "latest")
    if os.path.islink(latest):
        os.remove(latest)
    os.symlink(f"attempt_{attempt}", latest)
    trainer_log = open(os.path.join(logs, f"attempt_{attempt}", "trainer.log"), "a", buffering=1)

    def log(msg: str) -> None:
        trainer_log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} INFO {msg}\n")

    if not torch.cuda.is_available():
        log("ERROR no CUDA device visible (CUDA_VISIBLE_DEVICES=%r)" % os.environ.get("CUDA_VISIBLE_DEVICES"))
        print("ERROR: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    log(f"device {torch.cuda.get_device_name(dev)} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")

    torch.manual_seed(0)
    target = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 1)).to(dev)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 2048),
                                torch.nn.GELU(), torch.nn.Linear(2048, 1)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    first = 1
    steps = sorted(int(n.split("_")[1]) for n in os.listdir(ckpts) if n.startswith("step_"))
    if args.resume and steps:
        state = torch.load(os.path.join(ckpts, f"step_{steps[-1]}", "trainer", "model.pt"), map_location=dev)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        first = steps[-1] + 1
    log(f"max_steps={max_steps} start_step={first}")

    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))
    metrics = open(os.path.join(run, "metrics.jsonl"), "a", buffering=1)
    for step in range(first, max_steps + 1):
        began = time.time()
        x = torch.randn(4096, 512, device=dev)
        with torch.no_grad():
            y = target(x)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item()
        opt.step()
        torch.cuda.synchronize()
        took = time.time() - began
        l = loss.item()
        metrics.write(json.dumps({"step": step, "time": time.time(), "reward/all/mean": 1 / (1 + l), "loss/mean": l,
                                  "optim/grad_norm": grad_norm, "perf/throughput": 4096 / took, "time/step": took}) + "\n")
        log(f"step {step} | loss {l:.5f} | {took * 1000:.1f} ms")
        if interval and step % interval == 0:
            d = os.path.join(ckpts, f"step_{step}")
            os.makedirs(os.path.join(d, "trainer"), exist_ok=True)
            os.makedirs(os.path.join(d, "orchestrator"), exist_ok=True)
            torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, os.path.join(d, "trainer", "model.pt"))
            with open(os.path.join(d, "orchestrator", "progress.json"), "w") as f:
                json.dump({"step": step}, f)
            log(f"saved checkpoint step_{step}")
        if stop["asked"]:
            log("received SIGTERM: shutting down after step %d" % step)
            return 143
    log(f"training finished after step {max_steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
