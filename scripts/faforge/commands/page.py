"""Write the channel page: a static index.html (plus JSON) where users find the build for their torch.

It lists the flash-attn packages a channel holds as a torch x CUDA grid per platform, C++ ABI and
python, with the exact install command and environment.yml for each cell, and beside them each other
family's packages (faforge.release.page.PageFamily: for one, platform, CUDA, GPU archs and the torch range
they serve), each with its own.
Each cell also gets the pip and uv lines of its pip cell (the matrix's cells for PyPI's torch), from the
wheel index of its torch minor and CUDA; with --index, each says whether its wheel is published there.
A user of pip only needs no channel: with --index and neither --channel nor ./channel, the page holds the pip
cells alone (written to ./page unless --out says where).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from faforge import config, paths
from faforge.channel.repodata import channel_url, query
from faforge.errors import EXIT_OK, FaforgeError, shorten, why_not_a_folder
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.matrix.releases import PLATFORMS
from faforge.pipindex.instructions import index_base
from faforge.release.page import DATA_FILE, HERE, page_data, write_page

PIP_ONLY_OUT = Path("page")  # where the page of the pip cells goes without a channel or --out


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--channel",
        metavar="PATH_OR_URL",
        help="channel to list (folder, file://, http(s):// or an anaconda.org owner name); "
        f"default: ./{config.DEFAULT_CHANNEL_DIR}, the folder `faforge publish` writes; with --index and no such "
        "folder, none: the page of the pip cells only",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where index.html and the JSON go; default: the --channel folder itself "
        f"(with --index and no channel: ./{PIP_ONLY_OUT})",
    )
    parser.add_argument(
        "--install-channel",
        metavar="NAME_OR_URL",
        help=f"the -c value shown to users (default: {HERE!r} = the URL the page is served from when it is "
        f"written into the channel folder, else $FAFORGE_CHANNEL or {config.PUBLIC_CHANNEL!r}; "
        f"{DATA_FILE}, which cannot know its URL, names $FAFORGE_CHANNEL or {config.PUBLIC_CHANNEL!r} for {HERE!r})",
    )
    parser.add_argument(
        "--index",
        metavar="DIR_OR_URL",
        help="the wheel index to read which pip cells are published: the root folder `faforge publish --index` "
        "writes, or its base URL (whose indexes are BASE/torch2.11-cu130/); a URL is also the base the pip "
        f"and uv lines name (else $FAFORGE_PIP_INDEX or {config.PUBLIC_PIP_INDEX}); default: not read",
    )


def default_channel(*, pip_only: bool = False) -> str | None:
    """./channel, publish's default; never the anaconda.org owner named "channel". None where it does not exist
    and a wheel index was given (`pip_only`): the page of the pip cells alone, for a user of pip only."""
    folder = config.DEFAULT_CHANNEL_DIR
    if not folder.is_dir():
        if pip_only:
            return None
        raise FaforgeError(
            f"no channel to list: ./{folder} (the default --channel, where `faforge publish` writes) "
            "does not exist yet",
            hint="publish first, or pass --channel URL (`faforge publish PACKAGE.conda` creates the folder), "
            "or pass --index for a page of the pip cells only",
        )
    return f"./{folder}"  # a path, so that faforge.channel.repodata reads the folder


def execute(args: argparse.Namespace) -> int:
    if args.install_channel is not None and not re.fullmatch(r"\S{1,2048}", args.install_channel):
        raise FaforgeError(
            "--install-channel is not a channel name or URL (empty, blank or too long)",
            input=f"--install-channel {args.install_channel}",
            hint="e.g. --install-channel https://prefix.dev/my-channel",
        )
    index = _wheel_index(args.index)
    if args.channel is not None:  # `--channel "$FAFORGE_CHANNEL_URL"` with the variable unset is refused here
        channel_url(
            args.channel,
            "--channel",
            if_empty="set the variable that names the channel, or leave --channel out for ./channel",
        )
    if args.out is not None:
        paths.output_dir(args.out, "--out")
    base = index.rstrip("/") if index and index.startswith(("http://", "https://")) else index_base()
    matrix = load_matrix()
    pip = [entry for f in FAMILIES for entry in f.page.pip_entries(matrix, base, index)]
    channel = args.channel if args.channel is not None else default_channel(pip_only=index is not None)
    names = [name for f in FAMILIES for name in f.page.conda_packages]
    records = query(channel, names, list(PLATFORMS)) if channel is not None else []
    in_channel = args.out is None and channel is not None
    out = args.out or (
        Path(channel) if channel is not None else PIP_ONLY_OUT
    )  # never into the wheel index: its paths are faforge's
    install_channel = args.install_channel or (HERE if in_channel else config.public_channel())
    data = page_data(records, matrix.table, install_channel, FAMILIES, pip, index)
    keys = [f.page.key for f in FAMILIES]
    with paths.user_path("--channel" if in_channel else "--out", out):
        page, data_file = write_page(data, out, config.public_channel(), keys)
    listed = [words for f in FAMILIES if (words := f.page.summary(data[f.page.key])) is not None]
    on_index = f", {sum(1 for p in pip if p['published'])} published in {index}" if index is not None else ""
    print(
        f"wrote {page} and {data_file} ({', '.join(listed)})"
        + f" with the pip and uv lines of {len(pip)} pip cells{on_index}"
    )
    return EXIT_OK


def _wheel_index(value: str | None) -> str | None:
    """--index as given: an http(s) URL (no blanks), or a wheel index root folder that exists."""
    if value is None:
        return None
    if value.startswith(("http://", "https://")):
        if not re.fullmatch(r"https?://[^\s/]+\S{0,2000}", value):
            raise FaforgeError(
                "--index is not a wheel index URL (blanks, no host, or too long)",
                input=f"--index {value}",
                hint="e.g. --index https://faforge.github.io/wheels (the base of BASE/torch2.11-cu130/)",
            )
        return value
    if not value.strip():
        raise FaforgeError(
            "--index is empty",
            input="--index ''",
            hint=f"name the wheel index folder (e.g. ./{config.DEFAULT_INDEX_DIR}) or its URL",
        )
    folder = Path(value)
    with paths.user_path("--index", folder):
        if not folder.is_dir():
            raise FaforgeError(
                f"--index {shorten(value)}: {why_not_a_folder(folder)}",
                input=f"--index {value}",
                hint="name the root folder `faforge publish --index` wrote "
                f"(e.g. ./{config.DEFAULT_INDEX_DIR}), or its URL",
            )
    return value
