#!/usr/bin/env python3
"""A small real PyTorch training run that the GPU agent can drive as its rl command.

It takes prime-rl's command line (`@ rl.toml --output-dir DIR --run.name NAME
[--resume.step N]`) and writes prime-rl's layout as prime-rl 559b447 does: DIR/NAME/metrics.jsonl
(trainer rows, prime-rl's key names), loguru-style logs in logs/attempt_N with logs/latest, and
checkpoints/step_N/trainer/ (its .metadata written last) with step_N/orchestrator/progress.pt.
So everything the agent does with prime-rl — streaming metrics and logs, committing whole
checkpoints, resuming — is exercised on a real GPU without vLLM or an environment. It trains a
small MLP to fit a fixed random function; the "reward" is 1 / (1 + loss). SIGTERM finishes the
current step and exits 1, as prime-rl's launcher does.

    gpuagent --rl-command "python3 examples/gpu/train_torch.py @ {config} --output-dir {output_dir} --run.name {run_name} {resume}" \
             --preflight-command "" --install-command "" --versions-command "echo {}" --allow-unpinned
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
    p.add_argument("--resume.step", dest="resume_step", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0)
    args, _ = p.parse_known_args(argv)
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

    def log(msg: str, level: str = "INFO") -> None:
        # loguru's format, as prime-rl writes it: HH:mm:ss, the level right-aligned to 7.
        trainer_log.write(f"{time.strftime('%H:%M:%S', time.gmtime())} {level:>7} {msg}\n")

    if not torch.cuda.is_available():
        log("no CUDA device visible (CUDA_VISIBLE_DEVICES=%r)" % os.environ.get("CUDA_VISIBLE_DEVICES"), "ERROR")
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
    if args.resume_step:
        d = os.path.join(ckpts, f"step_{args.resume_step}")
        if not os.path.exists(os.path.join(d, "trainer", ".metadata")):
            log(f"no whole checkpoint to resume from at {d}", "ERROR")
            return 1
        state = torch.load(os.path.join(d, "trainer", "model.pt"), map_location=dev)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        first = args.resume_step + 1
        log(f"Resuming from step {args.resume_step}")
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
        metrics.write(json.dumps({"step": step, "time": time.time(), "train/agg/all/agent/reward/mean": 1 / (1 + l), "loss/mean": l,
                                  "optim/grad_norm": grad_norm, "perf/throughput": 4096 / took, "time/step": took}) + "\n")
        log(f"Step {step} | {took:5.3f}s | Loss {l:.5f}", "SUCCESS")
        if interval and step % interval == 0:
            d = os.path.join(ckpts, f"step_{step}")
            os.makedirs(os.path.join(d, "trainer"), exist_ok=True)
            os.makedirs(os.path.join(d, "orchestrator"), exist_ok=True)
            torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, os.path.join(d, "trainer", "model.pt"))
            with open(os.path.join(d, "trainer", ".metadata"), "w") as f:  # last: the checkpoint is whole
                json.dump({"step": step}, f)
            tmp = os.path.join(d, "orchestrator", ".progress.pt.tmp")
            torch.save({"step": step}, tmp)
            os.replace(tmp, os.path.join(d, "orchestrator", "progress.pt"))
            log(f"Saved checkpoint to {d}")
        if stop["asked"]:
            log("Received SIGTERM, shutting down after step %d" % step, "WARNING")
            return 1
    log(f"Training finished after step {max_steps}", "SUCCESS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
