"""Drive the real prime CLI's API client (prime_cli/api/rl.py of the prime CLI 0.6.26, pinned in
the upstream conformance kit) against a hostedtrain API, for the Prime-compatible surface's test.

    prime_client.py KIT create CONFIG.toml [KEY=VALUE ...]
    prime_client.py KIT list | models
    prime_client.py KIT list-page PAGE LIMIT MINE      (the CLI 0.6.31's paged list)
    prime_client.py KIT get|stop|restart|delete|metrics|checkpoints|progress RUN_ID
    prime_client.py KIT logs RUN_ID [REGEX]
    prime_client.py KIT create-fft CONFIG.toml [KEY=VALUE ...]   (the full fine-tune path)
    prime_client.py KIT usage RUN_ID              (its billing client: `prime train usage RUN`)
    prime_client.py KIT env-servers RUN_ID | env-server-logs RUN_ID NAME
    prime_client.py KIT rollouts RUN_ID STEP [PAGE LIMIT]
    prime_client.py KIT distributions RUN_ID [TYPE [STEP]]

The API's URL and token come as the prime CLI reads them: PRIME_API_BASE_URL, PRIME_API_KEY.
It prints the client's answer as JSON (its pydantic models dumped), or {"error": ...} with
exit status 1 when the client raised.

`create` builds the payload as `prime train CONFIG` does: the CLI's own load_config steps
(toml, _remove_deprecated_config_keys, RLConfig), its collect_env_vars for the secrets, and
the very `rl_client.create_run(...)` call of its create_run command, taken from its source.
httpx is Debian's (python3-httpx): it is imported before the kit's stubs, which would
otherwise stand in for it.
"""

import ast
import inspect
import json
import os
import sys
import textwrap
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.append("/usr/lib/python3/dist-packages")  # Debian's httpx, after the interpreter's own
import h11  # noqa: E402,F401  real, before the kit's stubs answer for them
import httpcore  # noqa: E402,F401
import httpx  # noqa: E402,F401

kit, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, kit)
import stubs  # noqa: E402,F401  (the kit's: must precede every upstream import)

import prime_cli.commands.rl as cli_rl  # noqa: E402
from prime_cli.api.billing import BillingClient  # noqa: E402
from prime_cli.api.rl import RLClient  # noqa: E402
from prime_cli.api.training import HostedTrainingClient, build_payload_from_toml  # noqa: E402
from prime_cli.core.client import APIClient, APIError  # noqa: E402
from prime_cli.core.config import Config  # noqa: E402


def create_call_source() -> str:
    """The `rl_client.create_run(...)` call of the CLI's create_run command, as written."""
    src = textwrap.dedent(inspect.getsource(cli_rl.create_run))
    for node in ast.walk(ast.parse(src)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "create_run" and getattr(node.func.value, "id", "") == "rl_client"):
            return ast.get_source_segment(src, node)
    raise SystemExit("no rl_client.create_run(...) call in prime_cli.commands.rl.create_run")


def dump(v):
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json")
    if isinstance(v, list):
        return [dump(x) for x in v]
    return v


def main() -> int:
    rl_client = RLClient(APIClient())
    try:
        if cmd == "create":
            path = Path(args[0])
            data = cli_rl.toml.load(path)
            cli_rl._remove_deprecated_config_keys(data)
            cfg = cli_rl.RLConfig.model_validate(data)
            env_files = [str(path.parent / p) for p in cfg.env_file + cfg.env_files]
            secrets = cli_rl.collect_env_vars(env_args=args[1:] or None, env_files=env_files or None,
                                              on_warning=lambda m: None)
            app_config = Config()
            out = eval(create_call_source(), {}, {"rl_client": rl_client, "cfg": cfg, "secrets": secrets,
                                                  "app_config": app_config})
        elif cmd == "create-fft":
            # as the CLI's full fine-tune path builds its payload (commands/rl.py): the whole
            # TOML less its CLI-only keys, the two secrets it forwards, name, image and GPU type
            path = Path(args[0])
            raw = cli_rl.toml.load(path)
            secrets = cli_rl.collect_env_vars(env_args=args[1:] or None, env_files=None, on_warning=lambda m: None) or {}
            cfg = {k: v for k, v in raw.items() if k not in ("env_file", "env_files", "image_tag", "gpu_type")}
            payload = build_payload_from_toml(cfg, name=raw.get("name"), image_tag=raw.get("image_tag"),
                                              wandb_api_key=secrets.get("WANDB_API_KEY"), hf_token=secrets.get("HF_TOKEN"),
                                              gpu_type=raw.get("gpu_type"))
            out = HostedTrainingClient(APIClient()).create_run(payload)
        elif cmd == "fft-models":
            out = HostedTrainingClient(APIClient()).list_available_fft_models()
        elif cmd == "gpu-types":
            out = HostedTrainingClient(APIClient()).list_available_gpu_types()
        elif cmd == "list":
            out = rl_client.list_runs()
        elif cmd == "list-page":
            # What the prime CLI from 0.6.31 sends (prime #880: page, limit, mine) through the
            # same APIClient; the pinned 0.6.26 client has no such call, so the raw answer.
            out = rl_client.client.get("/rft/runs", params={"page": args[0], "limit": args[1], "mine": args[2]})
        elif cmd == "models":
            out = rl_client.list_models()
        elif cmd == "get":
            out = rl_client.get_run(args[0])
        elif cmd == "stop":
            out = rl_client.stop_run(args[0])
        elif cmd == "restart":
            out = rl_client.restart_run(args[0])
        elif cmd == "delete":
            out = {"deleted": rl_client.delete_run(args[0])}
        elif cmd == "logs":
            search = args[1] if len(args) > 1 else None
            out = {"logs": rl_client.get_logs(args[0], tail_lines=50, search=search, regex=search is not None)}
        elif cmd == "metrics":
            out = rl_client.get_metrics(args[0], min_step=1, limit=100)
        elif cmd == "checkpoints":
            out = rl_client.list_checkpoints(args[0])
        elif cmd == "progress":
            out = rl_client.get_progress(args[0])
        elif cmd == "env-servers":
            out = rl_client.list_env_servers(args[0])
        elif cmd == "env-server-logs":
            out = {"logs": rl_client.get_env_server_logs(args[0], env_name=args[1], env_index=0, tail_lines=20)}
        elif cmd == "usage":
            out = BillingClient(APIClient()).get_run_usage(args[0])
        elif cmd == "rollouts":
            page, limit = (int(args[2]), int(args[3])) if len(args) > 3 else (1, 100)
            out = rl_client.get_rollouts(args[0], step=int(args[1]), page=page, limit=limit)
        elif cmd == "distributions":
            kind = args[1] if len(args) > 1 else None
            step = int(args[2]) if len(args) > 2 else None
            out = rl_client.get_distributions(args[0], distribution_type=kind, step=step)
        else:
            raise SystemExit(f"unknown command {cmd}")
    except APIError as exc:
        print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
        return 1
    print(json.dumps(dump(out), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
