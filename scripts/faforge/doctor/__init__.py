"""`faforge doctor`: facts about a Python environment -> problems in plain words -> exact fixes.

probe (runs inside the target interpreter) -> facts -> installs, binary (ABI gate,
torch symbol table) -> diagnose -> fixes (from the matrix) -> report.
"""
