"""numaplace-info with an environment value that is not text (ctest cli.numaplace-info.bad_bytes).

    python3 check_info_bytes.py <numaplace-info>

NUMAPLACE_HEAP_SHARDS set to bytes that are not UTF-8 and hold a newline: the degradation that refuses it
quotes it printably (\\xff\\xfe\\x0a4), the --json output is valid UTF-8 and valid JSON, and the text
report shows the message on one line.
"""
import json
import os
import subprocess
import sys

info = sys.argv[1]
env = os.environb.copy()
env[b"NUMAPLACE_HEAP_SHARDS"] = b"\xff\xfe\n4"
quoted = 'NUMAPLACE_HEAP_SHARDS="\\xff\\xfe\\x0a4" is not a whole number'

raw = subprocess.run([info, "--json"], env=env, stdout=subprocess.PIPE, check=True).stdout
try:
    doc = json.loads(raw.decode("utf-8"))  # strict: raises on a byte that is not UTF-8
except (UnicodeDecodeError, ValueError) as e:
    sys.exit(f"--json is not valid UTF-8 JSON: {e}")
messages = doc["degradations"]["messages"]
if not any(quoted in m for m in messages):
    sys.exit(f"no degradation quoting the value printably ({quoted!r}): {messages!r}")

text = subprocess.run([info], env=env, stdout=subprocess.PIPE, check=True).stdout.decode("utf-8")
lines = [l for l in text.splitlines() if "NUMAPLACE_HEAP_SHARDS=" in l]
if len(lines) != 1 or quoted not in lines[0] or not lines[0].rstrip().endswith("the heaps choose the shard count"):
    sys.exit(f"the text report's degradation is not one printable line: {lines!r}")
print("ok:", lines[0].strip())
