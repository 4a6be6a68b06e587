"""The graph rewrites of sluice.pipeline.passes match on schema metadata (``OpSchema(fusion=..., fuses=...,
device_form=..., transfer=...)``), never on operator names: a user's operator that declares the same metadata is
rewritten alike, an operator that only bears a rewritten operator's name is not, and the passes' sources hold no
comparison with a name and import no private name of an operator."""

import ast
from pathlib import Path

import pytest

import sluice
from sluice import fn
from sluice.ops.image import resize
from sluice.pipeline.executor import topological_order
from sluice.pipeline.graph import make_node
from sluice.pipeline.passes import fusion
from sluice.pipeline.passes.fusion import decode_audio_on_device, fuse
from sluice.pipeline.pipeline import Pipeline
from sluice.schema import REGISTRY, Arg, DeviceForm, FusionStage, OpSchema, fused_operator

PASSES = Path(sluice.__file__).resolve().parent / "pipeline" / "passes"


def _names(nodes):
    return [(n.schema.name, n.device) for n in nodes]


def _resize_like(name, **metadata):
    """A user's GPU operator taking resize's arguments (not registered: fn.x would not see it)."""
    return OpSchema(name, doc="A user's resize.", devices=("gpu",), args=list(resize.SCHEMA.args.values()),
                    register=False, **metadata)


def _chain(middle):
    """``external_source -> .gpu() -> middle -> crop_mirror_normalize`` on the GPU; its output DataNodes."""
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=1, exec_async=False)
    with pipe:
        g = fn.external_source(source=lambda: [], layout="HWC").gpu()
        r = make_node(middle, [g], {"resize_shorter": 30, "device": "gpu"})
        o = fn.crop_mirror_normalize(r, crop=(24, 24), device="gpu")
    return [o]


def test_a_users_operator_with_a_stages_metadata_is_fused():
    outs = _chain(_resize_like("user.resize_for_fusion", fusion=resize.SCHEMA.fusion))
    fused = fuse(topological_order(outs), outs)
    assert [n.schema for n in fused][-1] is fused_operator(resize.SCHEMA.fusion.chain)
    assert "user.resize_for_fusion" not in [n.schema.name for n in fused]
    assert fused[-1].const_args["r.resize_shorter"] == 30 and fused[-1].const_args["has_crop"] is False


@pytest.mark.parametrize("metadata", [{}, {"fusion": FusionStage("another_chain", 1, "r.", opens=True)},
                                      {"fusion": FusionStage(resize.SCHEMA.fusion.chain, 0, "r.")}])
def test_an_operator_named_resize_without_the_stage_is_not_fused(metadata):
    """Named ``resize`` but without metadata, in another chain, or at another position: left alone."""
    outs = _chain(_resize_like("resize", **metadata))
    nodes = topological_order(outs)
    assert _names(fuse(nodes, outs)) == _names(nodes)


def test_a_stage_whose_unless_argument_is_set_stays():
    outs = _chain(_resize_like("user.resize_with_attrs", fusion=resize.SCHEMA.fusion))
    nodes = topological_order(outs)
    nodes[-2].const_args["save_attrs"] = True  # resize's unless: an output the fused operator does not give
    assert _names(fuse(nodes, outs)) == _names(nodes)


def _moved_graph(schema, **args):
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=1, exec_async=False)
    with pipe:
        data = fn.external_source(source=lambda: [])
        out = make_node(schema, [data], dict(args, device="cpu"))
        return [out.gpu()]


def _decoder_like(name, **metadata):
    return OpSchema(name, doc="A user's decoder.", devices=("cpu", "mixed"), register=False,
                    args=[Arg("resample", float, 0.0, "Resample (never on the device).")], **metadata)


def test_a_users_operator_with_a_device_form_moves_onto_the_device():
    form = DeviceForm("mixed", when=lambda a: not a.get("resample"))
    schema = _decoder_like("user.decoder", device_form=form)
    outs = _moved_graph(schema)
    after = decode_audio_on_device(topological_order(outs), outs)
    assert ("user.decoder", "mixed") in _names(after) and not any(n.schema.transfer for n in after)
    assert after[-1].outputs[0] is outs[0]
    outs = _moved_graph(schema, resample=8000.0)  # the condition of the device form fails: the graph stays
    nodes = topological_order(outs)
    assert _names(decode_audio_on_device(nodes, outs)) == _names(nodes)


def test_an_operator_named_like_the_audio_decoder_without_a_device_form_stays():
    outs = _moved_graph(_decoder_like("decoders.audio"))
    nodes = topological_order(outs)
    assert _names(decode_audio_on_device(nodes, outs)) == _names(nodes)


def test_the_metadata_is_checked_where_it_is_declared():
    with pytest.raises(ValueError, match="device_form"):
        OpSchema("user.bad", doc="x", devices=("cpu",), register=False, device_form=DeviceForm("mixed"))
    with pytest.raises(ValueError, match="computed by"):
        OpSchema("user.second", doc="x", devices=("gpu",), register=False, fuses=resize.SCHEMA.fusion.chain)


def test_the_rewrites_are_declared_by_the_operators_they_rewrite():
    assert [REGISTRY[n].fusion.position for n in ("crop", "resize", "crop_mirror_normalize")] == [0, 1, 2]
    assert REGISTRY["decoders.audio"].device_form.device == "mixed"
    assert REGISTRY["_transfer"].transfer and not REGISTRY["copy"].transfer


def _sources():
    return {p.name: ast.parse(p.read_text()) for p in PASSES.glob("*.py")}


def test_the_passes_compare_no_operator_name():
    names = set(REGISTRY) | {fused_operator(resize.SCHEMA.fusion.chain).name}
    found = []
    for file, tree in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    if isinstance(side, ast.Attribute) and side.attr == "name":
                        found.append(f"{file}:{node.lineno}: compares .name")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and any(
                    isinstance(a, ast.Constant) and a.value == "name" for a in node.args):
                found.append(f"{file}:{node.lineno}: getattr(..., 'name')")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{file}:{node.lineno}: the operator name {node.value!r}")
    assert not found, found


def test_the_passes_import_no_private_name_of_an_operator():
    found = []
    for file, tree in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sluice.ops"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private or any(part.startswith("_") for part in node.module.split(".")):
                    found.append(f"{file}:{node.lineno}: from {node.module} import {private or '...'}")
    assert not found, found


def test_disabled_rewrites_keep_the_graph(monkeypatch):
    outs = _chain(resize.SCHEMA)
    nodes = topological_order(outs)
    monkeypatch.setattr(fusion, "ENABLED", False)
    assert _names(fuse(nodes, outs)) == _names(nodes)
