"""Drive the real prime CLI's deployment and inference clients (prime_cli/api/deployments.py
and prime_cli/api/inference.py of the prime CLI 0.6.26, pinned in the upstream conformance kit)
against hostedtrain, for the deployments' test.

    prime_deploy.py KIT deployable | adapters | adapter ID | deploy ID | unload ID
    prime_deploy.py KIT deploy-checkpoint CHECKPOINT_ID
    prime_deploy.py KIT models | model MODEL_ID
    prime_deploy.py KIT chat MODEL TEXT | chat-stream MODEL TEXT

The API's URL, the inference URL and the token come as the prime CLI reads them:
PRIME_API_BASE_URL, PRIME_INFERENCE_URL, PRIME_API_KEY. It prints the client's answer as JSON
(pydantic models dumped), or {"error": ...} with exit status 1 when the client raised; a stream
prints {"chunks": N, "text": ...} of the chunks the client yielded.
"""

import json
import sys

sys.dont_write_bytecode = True
sys.path.append("/usr/lib/python3/dist-packages")  # Debian's httpx, after the interpreter's own
import h11  # noqa: E402,F401  real, before the kit's stubs answer for them
import httpcore  # noqa: E402,F401
import httpx  # noqa: E402,F401

kit, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, kit)
import stubs  # noqa: E402,F401  (the kit's: must precede every upstream import)

from prime_cli.api.deployments import DeploymentsClient  # noqa: E402
from prime_cli.api.inference import InferenceClient  # noqa: E402
from prime_cli.core.client import APIClient  # noqa: E402


def dump(v):
    print(json.dumps(v, default=str))


try:
    if cmd in ("models", "model", "chat", "chat-stream"):
        inf = InferenceClient()
        if cmd == "models":
            dump(inf.list_models())
        elif cmd == "model":
            dump(inf.retrieve_model(args[0]))
        elif cmd == "chat":
            dump(inf.chat_completion({"model": args[0], "messages": [{"role": "user", "content": args[1]}]}))
        else:
            chunks = list(inf.chat_completion({"model": args[0], "messages": [{"role": "user", "content": args[1]}], "stream": True}, stream=True))
            text = "".join((c.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for c in chunks if c.get("choices"))
            dump({"chunks": len(chunks), "text": text})
    else:
        dc = DeploymentsClient(APIClient())
        if cmd == "deployable":
            dump(dc.get_deployable_models())
        elif cmd == "adapters":
            adapters, total = dc.list_adapters()
            dump({"adapters": [a.model_dump(mode="json") for a in adapters], "total": total})
        elif cmd == "adapter":
            dump(dc.get_adapter(args[0]).model_dump(mode="json"))
        elif cmd == "deploy":
            dump(dc.deploy_adapter(args[0]).model_dump(mode="json"))
        elif cmd == "unload":
            dump(dc.unload_adapter(args[0]).model_dump(mode="json"))
        elif cmd == "deploy-checkpoint":
            dump(dc.deploy_checkpoint(args[0]).model_dump(mode="json"))
        else:
            raise SystemExit("unknown command " + cmd)
except Exception as e:  # noqa: BLE001  the client's error, as the CLI would print it
    dump({"error": str(e)})
    sys.exit(1)
