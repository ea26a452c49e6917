"""`python -m verifuse prove`: every rule Proved, every mutant Refuted (the CI gate on rules)."""
import json
import subprocess
import sys


def test_prove_json_all_rules_proved_all_mutants_refuted(tmp_path):
    result = subprocess.run([sys.executable, "-m", "verifuse", "prove", "--json", "--cache-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert len(report["rules"]) >= 20
    for rule in report["rules"]:
        assert rule["verdict"] == "Proved", rule
        assert rule["mutants"], f"{rule['rule']} has no mutants"
        for mutant in rule["mutants"]:
            assert mutant["killed"] is True, (rule["rule"], mutant)
            assert mutant["result"]["verdict"] == "Refuted", (rule["rule"], mutant)
