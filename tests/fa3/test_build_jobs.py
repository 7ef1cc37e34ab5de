"""FlashAttention-3's build stage (faforge.families.flash_attn_3.build): which jobs its package ids and parts
mean, the pieces as `faforge plan` split each package."""

from __future__ import annotations

import pytest

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.build import package_jobs
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.families.flash_attn_3.plan import piece_estimates
from faforge.matrix import load_matrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_an_fa3_package_is_one_whole_job_listed_once(matrix):
    a, b = packages_of(matrix)[0], packages_of(matrix)[1]
    cell = matrix.cells[0].id
    assert package_jobs(matrix, [(b.id, "all"), (cell, "cell"), (a.id, "all"), (b.id, "all")], piece_estimates) == [
        (b, "all", ()),
        (a, "all", ()),
    ]


def test_an_fa3_piece_compiles_the_tus_faforge_plan_gave_it_and_an_unknown_part_says_which_exist(matrix):
    """A piece job (`faforge build ID --part sm80_bwd`) builds the TUs plan's split gave that piece: the
    package's sm80 backward kernels, through FAFORGE_BUILD_TUS; its `all` job builds the package."""
    a = packages_of(matrix)[0]
    (package, part, tus), whole = package_jobs(matrix, [(a.id, "sm80_bwd"), (a.id, "all")], piece_estimates)
    assert (package, part, whole) == (a, "sm80_bwd", (a, "all", ()))
    assert tus and all(t.startswith("flash_bwd_") and t.endswith("_sm80.cu") for t in tus)
    for part in ("cell", "kernels-link", "sm90_fwd"):
        with pytest.raises(
            FaforgeError, match=f"--part {part}: {a.id} is a flash-attn-3 package without such a piece"
        ) as caught:
            package_jobs(matrix, [(a.id, part)], piece_estimates)
        assert "sm90_fwd-1of2" in caught.value.hint and caught.value.hint.endswith("then all")
    with pytest.raises(FaforgeError, match="without such a piece") as caught:  # no estimate: one whole job
        package_jobs(matrix, [(a.id, "sm80_bwd")], None)
    assert "--part all" in caught.value.hint
