"""The public namespaces: ``llmrt`` curated, the rest in public modules of their own.

``llmrt`` holds what a program calls or types to make calls and read their
streams, at most `MAX_TOP_LEVEL` names; images, the vocabulary's open parts
and the adapter author's kit are ``llmrt.images``, ``llmrt.vocabulary`` and
``llmrt.adapter``. Each ``__all__`` is sorted as ruff's RUF022 sorts (constants,
then classes, then the rest), names only what the module binds, and the
module binds no public name it leaves out of ``__all__``.
"""

from __future__ import annotations

import re
import types

import pytest

import llmrt
import llmrt.adapter
import llmrt.images
import llmrt.vocabulary

#: trio exports 72 names, httpx 69: a namespace a reader can take in at once.
MAX_TOP_LEVEL = 80
MODULES = [llmrt, llmrt.adapter, llmrt.images, llmrt.vocabulary]
#: Names a public module shares with ``llmrt``: the contract and the image block
#: are everyday names, and also where their module's story starts.
SHARED = {"Adapter", "ImageBlock"}


def _ruf022_key(name: str) -> tuple[int, list[object]]:
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return kind, natural


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_is_sorted_complete_and_bound(module: types.ModuleType) -> None:
    names = list(module.__all__)
    assert names == sorted(names, key=_ruf022_key)
    assert len(set(names)) == len(names)
    assert all(hasattr(module, name) for name in names)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    public.discard("annotations")  # `from __future__ import annotations` binds it
    assert public == set(names) - {"__version__"}


def test_the_top_level_namespace_is_curated() -> None:
    assert len(llmrt.__all__) <= MAX_TOP_LEVEL
    for module in MODULES[1:]:
        assert set(module.__all__) & set(llmrt.__all__) <= SHARED, module.__name__


def test_the_image_api_is_in_llmrt_images_only() -> None:
    image_names = {
        name for name in llmrt.images.__all__ if "image" in name.lower() and name not in SHARED
    }
    assert len(image_names) >= 20
    assert not image_names & set(dir(llmrt))
    # One shared object, not a copy: ``llmrt.ImageBlock`` is ``llmrt.images.ImageBlock``.
    assert llmrt.ImageBlock is llmrt.images.ImageBlock
    assert llmrt.Adapter is llmrt.adapter.Adapter
