"""Images: durable attachments, route projection, variants, access, offloading, pricing.

One section per sentence of issue 12, item 1.
"""

from __future__ import annotations

import base64
import inspect
import json

import msgspec
import pytest
import trio
from _image_support import MemoryStore, image_route
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import llmrt
from llmrt import (
    ErrorCode,
    FinishError,
    FinishStop,
    GenerateOptions,
    ImageBlock,
    LlmCallConfig,
    LlmError,
    Message,
    ResolvedModelInfo,
    TextBlock,
    ToolResultBlock,
    tool_result_message,
    user_message,
)
from llmrt._image_route import project_images
from llmrt.adapters.scripted import ScriptedAdapter, text_script
from llmrt.images import (
    ImageAttachmentAccess,
    ImageAttachmentRef,
    ImageOffloadPolicy,
    ImageRequestPolicy,
    ImageRequestPricing,
    ImageRequestTarget,
    image_placeholder,
    offload_request_images_with_policy,
    offloaded_image_placeholder,
    offloaded_image_prefix_count,
    request_image_sizes,
    resolve_image_attachment_access,
)

SHA = "sha256:" + "a" * 64


def ref(size: int = 3, **kw: object) -> ImageAttachmentRef:
    fields: dict[str, object] = {"attachment_id": SHA, "media_type": "image/png", "byte_size": size}
    fields.update(kw)
    return ImageAttachmentRef(**fields)  # type: ignore[arg-type]


def durable(size: int, n: int = 0, **kw: object) -> ImageBlock:
    return ImageBlock(attachment=ref(size, attachment_id=f"sha256:{n:064x}", **kw))


def request(*messages: Message, provider: str = "p") -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m", messages=messages)


async def run(
    rt: llmrt.LlmRuntime, options: GenerateOptions
) -> tuple[llmrt.BlockAssembler, list[llmrt.StreamChunk]]:
    assembler = llmrt.BlockAssembler()
    chunks = []
    async with rt.stream(options) as call:
        async for chunk in call:
            assembler.push(chunk)
            chunks.append(chunk)
    return assembler, chunks


def images_of(options: GenerateOptions) -> tuple[ImageBlock, ...]:
    return llmrt.images.request_images(options.messages)


# --- 1. an ImageBlock can be a durable attachment reference -------------------------------


def test_an_image_block_can_be_a_durable_attachment_reference() -> None:
    attachment = llmrt.images.image_attachment_ref(
        b"\x89PNG...", "image/png", width=640, height=480
    )
    assert attachment.attachment_id.startswith("sha256:") and attachment.byte_size == 7
    block = ImageBlock(attachment=attachment)
    assert block.media_type == "image/png"  # the attachment's
    assert json.loads(llmrt.encode(block)) == {
        "type": "image",
        "mediaType": "image/png",
        "attachment": {
            "attachmentId": attachment.attachment_id,
            "mediaType": "image/png",
            "byteSize": 7,
            "width": 640,
            "height": 480,
        },
    }
    message = user_message((TextBlock(text="see"), block))
    assert llmrt.decode_message(llmrt.encode(message)) == message
    # The same bytes are the same attachment wherever they are stored.
    assert llmrt.images.image_attachment_ref(b"\x89PNG...", "image/png") == ImageAttachmentRef(
        attachment_id=attachment.attachment_id, media_type="image/png", byte_size=7
    )
    # Inline and URL images stay valid as they were.
    assert ImageBlock(media_type="image/png", data="AA==").attachment is None
    assert ImageBlock(media_type="image/png", url="https://x/a.png").variant_id is None


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"data": "AA==", "attachment": ref()}, "exactly one"),
        ({"url": "u", "data": "AA==", "attachment": ref(), "variant_id": "v"}, "exactly one"),
        ({"attachment": ref(), "media_type": "image/jpeg"}, "attachment's"),
        ({"attachment": ref(), "variant_id": "v"}, "no version yet"),
        ({"data": "AA==", "media_type": "image/png", "variant_id": "v"}, "version of an"),
        ({"data": "AA=="}, "media type"),
    ],
)
def test_mixed_image_forms_are_refused_on_construction_and_decode(
    fields: dict[str, object], needle: str
) -> None:
    with pytest.raises(ValueError, match=needle):
        ImageBlock(**fields)  # type: ignore[arg-type]
    wire = {"type": "image"} | {
        {"media_type": "mediaType", "variant_id": "variantId"}.get(k, k): (
            msgspec.to_builtins(v) if isinstance(v, ImageAttachmentRef) else v
        )
        for k, v in fields.items()
    }
    with pytest.raises(llmrt.DecodeError, match=needle):
        llmrt.decode(json.dumps(wire), llmrt.ContentBlock)


def test_an_attachment_reference_is_validated() -> None:
    with pytest.raises(ValueError, match="byte_size"):
        ref(-1)
    with pytest.raises(ValueError, match="width and height"):
        ref(width=0)
    bad = {"attachmentId": "../etc/passwd", "mediaType": "image/png", "byteSize": 1}
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(json.dumps(bad), type=ImageAttachmentRef)


# --- 2. a route projects a reference into its own request version --------------------------


async def test_each_route_gets_its_own_version_and_the_caller_keeps_the_reference() -> None:
    store = MemoryStore()
    photo = store.put(b"photo-bytes", "image/png", width=4000, height=3000, name="cat.png")
    small = ImageRequestPolicy(
        target=ImageRequestTarget(max_width=1000, max_height=1000, media_types=("image/jpeg",))
    )
    adapter = image_route(policies={"small": small})
    options = request(user_message((TextBlock(text="what is this?"), ImageBlock(attachment=photo))))
    before = llmrt.encode(options)
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["small", "full"], adapter)
        for provider in ("small", "full"):
            assembler, _ = await run(rt, msgspec.structs.replace(options, provider=provider))
            assert assembler.finish == FinishStop()
    to_small, to_full = (images_of(sent)[0] for sent in adapter.requests)
    # The small route got a 1000x750 JPEG version; the other the stored original.
    assert base64.b64decode(to_small.data or "") == b"image/jpeg 1000x750:photo-bytes"
    assert to_small.media_type == "image/jpeg"
    assert base64.b64decode(to_full.data or "") == b"photo-bytes"
    assert to_full.media_type == "image/png"
    # Both keep the durable reference beside the version.
    assert to_small.attachment == to_full.attachment == photo
    assert [target for _, target in store.reads] == [small.target, ImageRequestTarget()]
    # The caller's request (its history) is unchanged: still the durable reference.
    assert llmrt.encode(options) == before
    assert images_of(options)[0] == ImageBlock(attachment=photo)


async def test_one_attachment_is_read_once_per_request_nested_results_included() -> None:
    store = MemoryStore()
    shot = store.put(b"screen", width=10, height=10)
    options = request(
        tool_result_message("c1", (TextBlock(text="took it"), ImageBlock(attachment=shot))),
        user_message((TextBlock(text="again:"), ImageBlock(attachment=shot))),
    )
    adapter = image_route()
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        await run(rt, options)
    sent = images_of(adapter.requests[0])
    assert len(sent) == 2 and sent[0] == sent[1] and sent[0].variant_id is not None
    nested = adapter.requests[0].messages[0].content[0]
    assert isinstance(nested, ToolResultBlock) and nested.content[0] == TextBlock(text="took it")
    assert len(store.reads) == 1


async def test_projection_failures_end_the_call_with_a_coded_error_before_the_adapter() -> None:
    store = MemoryStore()
    known = store.put(b"x", width=1, height=1)
    unknown = ImageBlock(attachment=ref(5, attachment_id="sha256:" + "f" * 64))
    cases: list[tuple[MemoryStore | None, ImageBlock, ErrorCode, str]] = [
        (None, ImageBlock(attachment=known), ErrorCode.INVALID_REQUEST, "no image store"),
        (store, unknown, ErrorCode.INVALID_REQUEST, "could not provide"),
    ]
    for which, image, code, needle in cases:
        adapter = image_route()
        async with llmrt.open_runtime(image_attachments=which) as rt:
            await rt.register_adapter(["p"], adapter)
            assembler, _ = await run(rt, request(user_message(image)))
        assert isinstance(assembler.finish, FinishError)
        assert assembler.finish.failure.code == code
        assert needle in assembler.finish.failure.message
        assert adapter.requests == []


async def test_a_version_the_route_does_not_allow_is_refused() -> None:
    store = MemoryStore()
    big = store.put(b"0123456789", width=10, height=10)
    adapter = image_route(
        policies={"p": ImageRequestPolicy(target=ImageRequestTarget(max_bytes=4))}
    )
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        assembler, _ = await run(rt, request(user_message(ImageBlock(attachment=big))))
    assert isinstance(assembler.finish, FinishError)
    assert assembler.finish.failure.code == ErrorCode.INVALID_REQUEST
    assert "at most 4" in assembler.finish.failure.message


async def test_a_slow_store_is_bounded_by_the_projection_time_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore(delay=3600.0)
    image = ImageBlock(attachment=store.put(b"slow", width=1, height=1))
    adapter = image_route()
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        started = trio.current_time()
        assembler, _ = await run(rt, request(user_message(image)))
        elapsed = trio.current_time() - started
    assert isinstance(assembler.finish, FinishError)
    assert assembler.finish.failure.code == ErrorCode.TIMEOUT
    assert elapsed == pytest.approx(llmrt.images.DEFAULT_IMAGE_PROJECTION_TIMEOUT)
    assert adapter.requests == []


async def test_an_abort_ends_a_store_read_at_once(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore(delay=20.0)
    image = ImageBlock(attachment=store.put(b"slow", width=1, height=1))
    adapter = image_route()
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(request(user_message(image))) as call:
            await trio.sleep(1.0)
            assert store.reads  # the store is being read
            call.abort()
            chunks = [chunk async for chunk in call]
            aborted_at = trio.current_time()
    finish = chunks[-1]
    assert isinstance(finish, llmrt.Finish) and isinstance(finish.reason, llmrt.FinishAborted)
    assert aborted_at == pytest.approx(1.0)
    assert adapter.requests == []


async def test_the_store_must_be_an_image_attachments() -> None:
    with pytest.raises(TypeError, match="ImageAttachments"):
        async with llmrt.open_runtime(image_attachments=object()):  # type: ignore[arg-type]
            pass


async def test_a_bad_policy_from_the_adapter_is_a_coded_error() -> None:
    adapter = image_route(policies={"p": "not a policy"})
    store = MemoryStore()
    image = ImageBlock(attachment=store.put(b"x"))
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        assembler, _ = await run(rt, request(user_message(image)))
        with pytest.raises(LlmError) as caught:
            rt.image_request_policy("p", "m")
    assert caught.value.code == ErrorCode.INVALID_MODEL_INFO
    assert isinstance(assembler.finish, FinishError)
    assert assembler.finish.failure.code == ErrorCode.INVALID_MODEL_INFO


async def test_a_prepared_call_projects_through_its_captured_route() -> None:
    store = MemoryStore()
    photo = store.put(b"p", width=2000, height=1000)
    policy = ImageRequestPolicy(target=ImageRequestTarget(max_width=500))
    adapter = image_route(policies={"p": policy})
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        prepared = await rt.prepare_call(LlmCallConfig(provider="p", model="m"))
        options = request(user_message(ImageBlock(attachment=photo)))
        async with prepared.stream(options) as call:
            async for _ in call:
                pass
    sent = images_of(adapter.requests[0])[0]
    assert base64.b64decode(sent.data or "") == b"image/png 500x250:p"


# --- 3. variantId names the version a route got ---------------------------------------------


async def test_the_request_version_carries_its_variant_id_on_the_wire() -> None:
    store = MemoryStore()
    photo = store.put(b"abc", width=2, height=2)
    adapter = image_route()
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        await run(rt, request(user_message(ImageBlock(attachment=photo))))
    sent = images_of(adapter.requests[0])[0]
    # The variant id is the store's name for exactly these bytes.
    assert sent.variant_id == photo.attachment_id  # the original, content-addressed alike
    wire = json.loads(llmrt.encode(sent))
    assert wire["variantId"] == sent.variant_id
    assert wire["data"] == base64.b64encode(b"abc").decode()
    assert wire["attachment"]["attachmentId"] == photo.attachment_id
    assert "variant_id" not in wire
    assert llmrt.decode(llmrt.encode(sent), llmrt.ContentBlock) == sent
    # An already projected image passes through a second projection unchanged.
    again = await llmrt.images.project_request_images(adapter.requests[0], None, None)
    assert again is adapter.requests[0]


# --- 4. resolve_image_attachment_access ------------------------------------------------------


def test_resolve_image_attachment_access_maps_the_host_object_into_the_tool_world() -> None:
    store = MemoryStore()
    photo = store.put(b"img", width=1, height=1)
    host = "/host/attachments/" + photo.attachment_id
    store.host_paths[photo.attachment_id] = host

    def sandbox(path: str) -> str | None:
        prefix = "/host/attachments/"
        return "/mnt/attachments/" + path[len(prefix) :] if path.startswith(prefix) else None

    durable_block = ImageBlock(attachment=photo)
    version = ImageBlock(
        media_type="image/jpeg", data="AA==", attachment=photo, variant_id="sha256:" + "b" * 64
    )
    expected = ImageAttachmentAccess(readonly_path="/mnt/attachments/" + photo.attachment_id)
    for image in (photo, durable_block, version):
        assert resolve_image_attachment_access(store, image, sandbox) == expected
    # The request image and its variant are what they were.
    assert version.variant_id == "sha256:" + "b" * 64 and version.data == "AA=="
    # No host object, a world that cannot see it, or no attachment: no access.
    other = store.put(b"other")
    assert resolve_image_attachment_access(store, other, sandbox) is None
    assert resolve_image_attachment_access(store, photo, lambda path: None) is None
    inline = ImageBlock(media_type="image/png", data="AA==")
    assert resolve_image_attachment_access(store, inline, sandbox) is None
    # The offload placeholder can tell a tool where to read it.
    text = offloaded_image_placeholder(durable_block, expected)
    assert expected.readonly_path in text and photo.attachment_id in text


async def test_the_runtime_resolves_access_through_its_store() -> None:
    store = MemoryStore()
    photo = store.put(b"img")
    store.host_paths[photo.attachment_id] = "/h/x"
    async with llmrt.open_runtime(image_attachments=store) as rt:
        access = rt.resolve_image_attachment_access(ImageBlock(attachment=photo), lambda p: p)
    assert access == ImageAttachmentAccess(readonly_path="/h/x")
    async with llmrt.open_runtime() as rt:
        assert rt.resolve_image_attachment_access(photo, lambda p: p) is None


# --- 5. offloading removes the oldest images by size and count, in quanta ---------------------


def placeholders(messages: tuple[Message, ...]) -> list[str]:
    out: list[str] = []

    def walk(blocks: tuple[llmrt.ContentBlock, ...]) -> None:
        for block in blocks:
            if type(block) is TextBlock and block.text.startswith("[image left out"):
                out.append(block.text)
            elif type(block) is ToolResultBlock:
                walk(block.content)

    for message in messages:
        walk(message.content)
    return out


def test_offloading_by_raw_size_removes_the_oldest_first() -> None:
    images = [durable(100, n) for n in range(5)]
    messages = (user_message(images[:2]), user_message(images[2:]))
    policy = ImageOffloadPolicy(max_bytes=300)
    out = offload_request_images_with_policy(messages, policy)
    assert llmrt.images.request_images(out) == tuple(images[2:])
    assert placeholders(out) == [offloaded_image_placeholder(i) for i in images[:2]]
    # Exactly at the limit nothing moves, and the caller's tuple comes back.
    same = (user_message(images[:3]),)
    assert offload_request_images_with_policy(same, policy) is same


def test_offloading_by_base64_size_counts_the_encoded_length() -> None:
    # 3 raw bytes are 4 base64 characters; 4 raw bytes are 8.
    messages = (user_message([durable(3, 0), durable(3, 1)]),)
    assert (
        offload_request_images_with_policy(
            messages, ImageOffloadPolicy(representation="base64", max_bytes=8)
        )
        is messages
    )
    out = offload_request_images_with_policy(
        messages, ImageOffloadPolicy(representation="base64", max_bytes=7)
    )
    assert len(llmrt.images.request_images(out)) == 1
    assert (
        offload_request_images_with_policy(
            messages, ImageOffloadPolicy(representation="raw", max_bytes=7)
        )
        is messages
    )
    # Inline data counts its decoded size (raw) or its own length (base64).
    inline = ImageBlock(media_type="image/png", data=base64.b64encode(b"12345").decode())
    assert llmrt.images.image_byte_size(inline) == 5
    assert llmrt.images.base64_length(5) == len(inline.data or "") == 8


def test_offloading_by_count_and_byte_quanta() -> None:
    # 601 images over a 600 limit, removed 20 at a time.
    many = (user_message([durable(1, n) for n in range(601)]),)
    out = offload_request_images_with_policy(
        many, ImageOffloadPolicy(max_images=600, count_quantum=20)
    )
    assert len(llmrt.images.request_images(out)) == 581 and len(placeholders(out)) == 20
    # 129 one-MiB images over 128 MiB with a 64 MiB quantum: 64 go, and that cut
    # stays where it is until the history passes 192 MiB.
    mib = 1024 * 1024
    policy = ImageOffloadPolicy(max_bytes=128 * mib, byte_quantum=64 * mib)
    assert offloaded_image_prefix_count([mib] * 128, policy) == 0
    assert offloaded_image_prefix_count([mib] * 129, policy) == 64
    assert offloaded_image_prefix_count([mib] * 192, policy) == 64
    assert offloaded_image_prefix_count([mib] * 193, policy) == 128
    # Both limits: the cut satisfies each.
    both = ImageOffloadPolicy(max_images=3, max_bytes=10)
    assert offloaded_image_prefix_count([1, 1, 1, 1, 9], both) == 3
    assert offloaded_image_prefix_count([9, 1, 1, 1, 1], both) == 2
    assert offloaded_image_prefix_count([1, 1, 1, 1, 20], both) == 5


def test_offloading_reaches_nested_tool_results_and_never_mutates_history() -> None:
    shot = durable(5, 1)
    messages = (
        tool_result_message("c1", (TextBlock(text="shot"), shot)),
        user_message((durable(5, 2), durable(5, 3))),
    )
    before = msgspec.json.encode(messages)
    out = offload_request_images_with_policy(messages, ImageOffloadPolicy(max_bytes=10))
    result = out[0].content[0]
    assert isinstance(result, ToolResultBlock)
    assert result.content == (
        TextBlock(text="shot"),
        TextBlock(text=offloaded_image_placeholder(shot)),
    )
    assert out[1] is messages[1]  # untouched messages are the caller's own objects
    assert msgspec.json.encode(messages) == before
    options = request(*messages)
    assert (
        offload_request_images_with_policy(options, ImageOffloadPolicy(max_bytes=10)).messages
        == out
    )


async def test_a_route_offloads_before_reading_and_reads_only_what_it_keeps() -> None:
    store = MemoryStore()
    refs = [store.put(bytes([n]) * 100, width=10, height=10) for n in range(4)]
    policy = ImageRequestPolicy(offload=ImageOffloadPolicy(max_images=2))
    adapter = image_route(policies={"p": policy})
    options = request(*(user_message(ImageBlock(attachment=r)) for r in refs))
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        await run(rt, options)
    sent = adapter.requests[0]
    assert [image.attachment for image in images_of(sent)] == refs[2:]
    assert [attachment for attachment, _ in store.reads] == [r.attachment_id for r in refs[2:]]
    assert placeholders(sent.messages) == [
        offloaded_image_placeholder(ImageBlock(attachment=r)) for r in refs[:2]
    ]


@pytest.mark.parametrize(
    "fields",
    [{"max_images": -1}, {"max_bytes": -5}, {"count_quantum": 0}, {"byte_quantum": 0}],
)
def test_an_offload_policy_is_validated(fields: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        ImageOffloadPolicy(**fields)  # type: ignore[arg-type]


# --- 6. the pure prefix count reproduces the projection's decision ----------------------------

_sizes = st.lists(st.integers(min_value=0, max_value=5000), max_size=40)
_policies = st.builds(
    ImageOffloadPolicy,
    representation=st.sampled_from(["raw", "base64"]),
    max_images=st.none() | st.integers(min_value=0, max_value=40),
    max_bytes=st.none() | st.integers(min_value=0, max_value=100_000),
    count_quantum=st.integers(min_value=1, max_value=10),
    byte_quantum=st.integers(min_value=1, max_value=20_000),
)


@settings(max_examples=examples(300), deadline=None)
@given(sizes=_sizes, policy=_policies, split=st.integers(min_value=0, max_value=40))
def test_the_prefix_count_equals_what_the_projection_removed(
    sizes: list[int], policy: ImageOffloadPolicy, split: int
) -> None:
    images = [durable(size, n) for n, size in enumerate(sizes)]
    # Half the images nested in a tool result, so the walk order matters too.
    messages = (
        tool_result_message("c", images[:split]),
        user_message([TextBlock(text="t"), *images[split:]]),
    )
    assert request_image_sizes(messages) == tuple(sizes)
    count = offloaded_image_prefix_count(sizes, policy)
    out = offload_request_images_with_policy(messages, policy)
    kept = llmrt.images.request_images(out)
    assert kept == tuple(images[count:])  # exactly the oldest `count` went
    assert len(placeholders(out)) == count
    lengths = (
        sizes if policy.representation == "raw" else [llmrt.images.base64_length(s) for s in sizes]
    )
    kept_lengths = lengths[count:]
    # The result is within the limits (or empty) ...
    if policy.max_images is not None:
        assert len(kept_lengths) <= policy.max_images or not kept_lengths
    if policy.max_bytes is not None:
        assert sum(kept_lengths) <= policy.max_bytes or not kept_lengths
    # ... and no shorter cut removes the whole-quantum excess.
    if count:
        excess_n = 0 if policy.max_images is None else max(0, len(sizes) - policy.max_images)
        excess_b = 0 if policy.max_bytes is None else max(0, sum(lengths) - policy.max_bytes)
        need_n = -(-excess_n // policy.count_quantum) * policy.count_quantum
        need_b = -(-excess_b // policy.byte_quantum) * policy.byte_quantum
        shorter = count - 1
        assert shorter < need_n or sum(lengths[:shorter]) < need_b


# --- 7. per-route image pricing, declared by the adapter, resolved synchronously --------------


async def test_image_request_pricing_is_declared_per_route_and_resolved_synchronously() -> None:
    store = MemoryStore()
    refs = [store.put(bytes([n]) * 1000, width=1024, height=1024) for n in range(3)]
    policy = ImageRequestPolicy(
        target=ImageRequestTarget(max_width=768, max_height=768),
        offload=ImageOffloadPolicy(max_bytes=2000),
    )
    rates = ImageRequestPricing(tokens_per_image=85, tile_size=512, tokens_per_tile=170)
    adapter = image_route(policies={"vision": policy}, pricing={"vision": rates})
    options = request(*(user_message(ImageBlock(attachment=r)) for r in refs), provider="vision")
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["vision", "free"], adapter)
        assert not inspect.iscoroutinefunction(rt.image_request_pricing)
        pricing = rt.image_request_pricing("vision", "m")
        assert pricing is not None and pricing.policy == policy  # the route's own policy
        assert rt.image_request_pricing("free", "m") is None  # charges no visual tokens
        with pytest.raises(LlmError) as caught:
            rt.image_request_pricing("nobody", "m")
        assert caught.value.code == ErrorCode.NO_ADAPTER
        price = pricing.price(options)
        await run(rt, options)
    # 3 x 1000 bytes over 2000: the oldest goes; two 768x768 images of 4 tiles remain.
    assert price == llmrt.images.ImageRequestPrice(images=3, offloaded=1, tokens=2 * (85 + 4 * 170))
    # ... which is exactly what the route sent, decided without reading a byte.
    sent = adapter.requests[0]
    assert len(placeholders(sent.messages)) == price.offloaded
    assert len(images_of(sent)) == price.images - price.offloaded


async def test_a_malformed_pricing_answer_is_a_coded_error() -> None:
    adapter = image_route(pricing={"p": {"tokens": 1}})
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        with pytest.raises(LlmError) as caught:
            rt.image_request_pricing("p", "m")
    assert caught.value.code == ErrorCode.INVALID_MODEL_INFO


def test_pricing_counts_unknown_sizes_flat() -> None:
    rates = ImageRequestPricing(tokens_per_image=10, tile_size=100, tokens_per_tile=1)
    rates = msgspec.structs.replace(rates, unknown_size_tokens=50)
    url = ImageBlock(media_type="image/png", url="https://x/a.png")
    sized = ImageBlock(attachment=ref(1, width=250, height=100))
    assert rates.price((user_message((url, sized)),)) == llmrt.images.ImageRequestPrice(
        images=2, offloaded=0, tokens=60 + 10 + 3
    )


# --- 8. text-only routes: deterministic per-image placeholders, history untouched ------------


async def test_a_text_only_route_gets_a_placeholder_per_durable_image_and_reads_nothing() -> None:
    store = MemoryStore()
    first = store.put(b"one", name="first.png")
    second = store.put(b"two", name="second.png")
    options = request(
        user_message((ImageBlock(attachment=first), ImageBlock(attachment=second))),
        tool_result_message("c", ImageBlock(attachment=first)),
    )
    before = llmrt.encode(options)
    adapter = ScriptedAdapter(
        text_script(["ok"]),
        model_info={
            "m": ResolvedModelInfo(provider="p", id="m", name="m", input_modalities=("text",))
        },
    )
    async with llmrt.open_runtime(image_attachments=store) as rt:
        await rt.register_adapter(["p"], adapter)
        await run(rt, options)
    user, tool = adapter.requests[0].messages
    one, two = (block.text for block in user.content if type(block) is TextBlock)
    assert one != two  # same media type, different images
    assert first.attachment_id in one and "first.png" in one
    nested = tool.content[0]
    assert isinstance(nested, ToolResultBlock)
    assert nested.content == (TextBlock(text=one),)  # the same image, the same text
    assert one == image_placeholder(ImageBlock(attachment=first))
    assert store.reads == []
    assert llmrt.encode(options) == before


# --- 9. the call path's one image step ---------------------------------------------------------


class _PolicyAsked:
    """An adapter whose image policy may not be asked (a request without images)."""

    def image_request_policy(self, provider: str, model: str) -> ImageRequestPolicy | None:
        raise AssertionError("a request without images asked the route's image policy")


async def test_the_image_step_leaves_a_request_without_images_alone() -> None:
    options = request(user_message("no images"), tool_result_message("c", "none either"))
    for modalities in (None, ("text",), ("text", "image")):
        assert await project_images(options, modalities, _PolicyAsked(), None) is options


async def test_the_image_step_rewrites_only_the_messages_with_changed_images() -> None:
    store = MemoryStore()
    old, kept = store.put(b"o" * 30), store.put(b"k" * 30)
    plain = user_message("between")
    options = request(
        user_message((ImageBlock(attachment=old),)),
        plain,
        tool_result_message("c", ImageBlock(attachment=kept)),
        user_message("after"),
    )
    policy = ImageRequestPolicy(offload=ImageOffloadPolicy(max_images=1))
    route = image_route(policies={"p": policy})
    projected = await project_images(options, None, route, store)
    first, between, tool, after = projected.messages
    assert first.content == (
        TextBlock(text=offloaded_image_placeholder(ImageBlock(attachment=old))),
    )
    nested = tool.content[0]
    assert isinstance(nested, ToolResultBlock) and isinstance(nested.content[0], ImageBlock)
    assert nested.content[0].variant_id is not None  # projected: the route's version
    assert [read for read, _ in store.reads] == [kept.attachment_id]  # the offloaded one unread
    # Messages without a changed image are the caller's own objects.
    assert between is plain and after is options.messages[3]
    # A text-only model: every image, nested ones too, becomes its placeholder; nothing read.
    store.reads.clear()
    text_only = await project_images(options, ("text",), _PolicyAsked(), store)
    assert images_of(text_only) == ()
    assert text_only.messages[1] is plain and store.reads == []
