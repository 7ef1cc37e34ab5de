"""One module per subcommand, each with configure_parser(parser) and execute(args) -> int.

Add a subcommand by adding its module name to COMMANDS.
"""

COMMANDS = [
    "bench-build",
    "bench-gpu",
    "build",
    "bump",
    "check-abi",
    "doctor",
    "generate",
    "index",
    "matrix",
    "page",
    "plan",
    "publish",
    "render",
    "test-gpu",
    "verify",
    "wheel",
]
