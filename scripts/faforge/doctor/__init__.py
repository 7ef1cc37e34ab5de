"""`faforge doctor`: facts about a Python environment -> problems in plain words -> exact fixes.

probe (probe_files joined in by probe_source; runs inside the target interpreter, started by probe_run)
-> probe_facts -> facts -> installs, binary (ABI gate, torch symbol table: torch_symbols, torch_symbols_file)
-> situation -> diagnose (rules_torch, rules_extension, rules_runtime) -> fixes (conda_fixes, pip_fixes; offers
from the matrix, fix_commands) -> report.
"""
