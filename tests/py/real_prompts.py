"""The 8 chat prompts the real-checkpoint tests generate from (greedy vs llama.cpp, fp8 vs f16 KV), in the
checkpoint's own ChatML form with Qwen's default system prompt."""

QUESTIONS = [
    "Write a Python function that reverses a string.",
    "What is the capital of France? Answer in one sentence.",
    "Explain what a hash table is to a beginner.",
    "Write a C function that returns the maximum of an array of ints.",
    "List three prime numbers greater than 50.",
    "How do I read a file line by line in Python?",
    "Translate 'good morning' into Spanish and German.",
    "What does the SQL statement SELECT COUNT(*) FROM users; do?",
]
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def chat_prompt(q):
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
