"""The summary of benchmarks/gpu/run.sh: one line per item of every part's JSON, the key figures,
and what failed (markdown, to stdout)."""
import json
import os
import sys


def figures(item):
    out = []
    t = item.get("times_ms")
    if t:
        out.append(", ".join(f"{k} {v:.3f} ms" for k, v in t.items()))
    for k in ("thunder_vs_eager", "thunder_vs_compile", "thunder_fraction_of_copy", "gb_per_s", "tests",
              "grads_checked", "graphs", "warm_step_s"):
        if k in item:
            v = item[k]
            out.append(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}")
    return "; ".join(out)


def main(out_dir, parts):
    lines, failed = [], 0
    for part in parts:
        path = os.path.join(out_dir, f"{part}.json")
        if not os.path.exists(path):
            lines.append(f"| {part} | - | NO RESULT (did not start: see run.log) | |")
            failed += 1
            continue
        doc = json.load(open(path))
        where = doc.get("gpu", {}).get("name") or doc["device"]
        for item in doc["items"]:
            status = "ok" if item["ok"] else "FAIL: " + item.get("error", "")[:400].replace("|", "/").replace("\n", " ")
            failed += not item["ok"]
            lines.append(f"| {part} ({where}) | {item['name']} | {status} | {figures(item)} |")
        for k in ("left_out", "truncated"):
            if k in doc:
                lines.append(f"| {part} | {k} | {doc[k]} | |")
        if doc.get("status"):
            lines.append(f"| {part} | exit | {doc['status']} | |")
    print("| part | item | status | figures |\n| --- | --- | --- | --- |")
    print("\n".join(lines))
    print(f"\n{failed} failed item(s)")
    return failed


if __name__ == "__main__":
    sys.exit(1 if main(sys.argv[1], sys.argv[2:]) else 0)
