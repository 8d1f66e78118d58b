"""Writes verifiers Trace records as prime-rl's file monitor keeps them (Trace.to_record(),
one JSON line each), built with the pinned verifiers code of the upstream kit.

usage: python3 traces.py KIT_DIR N > traces.jsonl
       python3 traces.py KIT_DIR check < traces.jsonl   (each line must load as upstream's
                                                         WireTrace and dump back the same)

Episode i answers example i // 4 (groups of four) and scores 1 when i % 4 < 1 + (i // 4) % 3,
a spread the Go test recomputes. Every eighth episode is a multi-turn tool call with typed
content parts and reasoning; episode 5 carries an error; one record has a 10 000-character
completion.
"""
import json
import sys

sys.path.insert(0, sys.argv[1])
import stubs  # noqa: E402,F401  (the kit's import stand-ins)

from verifiers.v1.configs.agent import WireAgentConfig  # noqa: E402
from verifiers.v1.graph import MessageNode  # noqa: E402
from verifiers.v1.trace import AgentInfo, Error, ModelCall, Reward, VersionInfo, WireTrace  # noqa: E402
from verifiers.v1.types import (  # noqa: E402
    AssistantMessage,
    SystemMessage,
    TextContentPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)


def score(i):
    return 1.0 if i % 4 < 1 + (i // 4) % 3 else 0.0


def episode(i):
    example = i // 4
    data = {"idx": example, "prompt": f"What is {example} + {example}?", "answer": str(2 * example)}
    t = WireTrace(
        verifiers=VersionInfo(version="0.1.15"),
        task={"type": "Task", "data": data, "key": f"task-{example}"},
        agent=AgentInfo(config=WireAgentConfig(), name="agent"),
    )
    nodes = [
        MessageNode(message=SystemMessage(content="Answer in \\boxed{}."), token_ids=[1, 2], mask=[False, False]),
        MessageNode(parent=0, message=UserMessage(content=[TextContentPart(text=data["prompt"])]), token_ids=[3], mask=[False]),
    ]
    answer = data["answer"] if score(i) else "0"
    if i % 8 == 7:
        nodes.append(MessageNode(parent=1, sampled=True, message=AssistantMessage(
            content=None, reasoning_content="I should use the calculator.",
            tool_calls=[ToolCall(id="c1", name="add", arguments=json.dumps({"a": example, "b": example}))]),
            token_ids=[4, 5], mask=[True, True], logprobs=[-0.1, -0.2]))
        nodes.append(MessageNode(parent=2, message=ToolMessage(tool_call_id="c1", content=str(2 * example)), token_ids=[6], mask=[False]))
        nodes.append(MessageNode(parent=3, sampled=True, message=AssistantMessage(content=f"\\boxed{{{answer}}}"),
                                 token_ids=[7], mask=[True], logprobs=[-0.3]))
    else:
        text = f"\\boxed{{{answer}}}" if i != 3 else "x" * 10000
        nodes.append(MessageNode(parent=1, sampled=True, message=AssistantMessage(content=text),
                                 token_ids=[4], mask=[True], logprobs=[-0.1]))
    t.nodes = nodes
    t.calls = [ModelCall(node=len(nodes) - 1, model="policy", usage=Usage(prompt_tokens=3, completion_tokens=5 + i))]
    t.rewards = {"correct": Reward(score=score(i), weight=1.0), "judge": None}
    t.metrics = {"format": 1.0, "unscored": None}
    t.ok = i != 5
    t.is_completed = True
    t.stop_condition = "completed" if i != 5 else "error"
    if i == 5:
        t.errors = [Error(type="ProviderError", message="upstream 500")]
    return t.to_record()


if sys.argv[2] == "check":
    for n, line in enumerate(sys.stdin, 1):
        record = json.loads(line)
        again = WireTrace.model_validate(record).to_record()
        if again != record:  # as values: 1 and 1.0 are one number
            sys.exit(f"line {n}: not what verifiers writes:\n ours: {json.dumps(record, sort_keys=True)[:2000]}\n real: {json.dumps(again, sort_keys=True)[:2000]}")
    print("ok")
else:
    for i in range(int(sys.argv[2])):
        print(json.dumps(episode(i)))
