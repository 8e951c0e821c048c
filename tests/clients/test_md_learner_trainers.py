"""The MD trainers' learners (``--model``, ``--eval-learner``; ``clients.md_learners``) against a
real server: each framework's evaluation classifies an episode's embeddings with the named
head exactly as the NumPy reference does; an episodic Matching Network trains in both
frameworks to the same first loss from the same ``--init-seed``; the batch-trained k-NN
baseline and the inference-only variants run end to end, their heads recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf  # noqa: F401  (before torch, as every tf test file)
import torch

from clients.core import EpisodeSpec, SamplerClient
from clients.md_fixed_features import matching_predictions, nearest_neighbour_predictions, prototype_predictions
from clients.tf.md_train import TFFramework
from clients.tf.md_train import main as tf_main
from clients.tf import models as tf_models
from clients.torch.backbones import to_model_input
from clients.torch.md_train import TorchFramework
from clients.torch.md_train import main as torch_main
from clients.torch.models import episode_norm
from clients.trainer_args import parse_args

SIZE = 16
REFERENCES = {
    "protonet": lambda s, labels, q, ways: prototype_predictions(s, labels, q, ways),
    "matchingnet": lambda s, labels, q, ways: matching_predictions(s, labels, q, ways),
    "knn": lambda s, labels, q, ways: nearest_neighbour_predictions(s, labels, q),
}
# Meta-Dataset's four_layer_convnet at 16 pixels (tests/clients/test_framework_parity.py says why)
MD = ["--sources", "folder", "--image-size", str(SIZE), "--backbone", "md-conv4", "--device", "cpu",
      "--init-seed", "0", "--log-every", "1"]
THREADS = {"torch": ["--threads", "1"], "tf": []}


def _test_episodes(served, count: int = 4):
    with SamplerClient(served.address) as client:
        return list(client.episodes(EpisodeSpec(sources=("folder",), split="test", image_size=SIZE), 0, count))


def _argv(served, *extra: str) -> list[str]:
    return ["--server", served.address, "--run", "r", *MD, *extra]


def _embedded(framework: str, built, episode) -> np.ndarray:
    """The episode embedded in one pass, its batch norms taking the support's moments."""
    images = np.concatenate([episode.support_images, episode.query_images])
    support, query = len(episode.support_images), len(episode.query_images)
    if framework == "torch":
        with torch.inference_mode(), episode_norm(built.backbone, "md", support, query):
            return built.backbone(to_model_input(torch.from_numpy(images), built.preprocessing,
                                                 torch.device("cpu"))).numpy()
    from clients.tf.backbones import to_model_input as tf_input

    with tf_models.episode_norm(built.backbone, "md", tf.constant(support), tf.constant(query)):
        return built.backbone(tf_input(tf.constant(images), built.preprocessing), training=False).numpy()


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_evaluation_classifies_with_the_named_head_as_the_reference(served, framework, torch_one_thread):
    episodes = _test_episodes(served)
    predictions: dict[str, list[np.ndarray]] = {}
    for head in REFERENCES:
        make = TorchFramework if framework == "torch" else TFFramework
        built = make(parse_args(framework, _argv(served, "--eval-learner", head, *THREADS[framework])))
        built.build(0)
        predictions[head] = []
        for episode in episodes:
            predicted, loss = built.evaluate(episode)
            embedded = _embedded(framework, built, episode)
            support = len(episode.support_images)
            expected = REFERENCES[head](embedded[:support], episode.support_labels, embedded[support:], episode.ways)
            agree = np.mean(np.asarray(predicted) == expected)
            assert agree >= 0.95, (head, episode.index, agree)  # float32 here, float64 there: near-ties may flip
            assert np.isfinite(loss)
            predictions[head].append(np.asarray(predicted))
    # the three heads disagree on these episodes: a head swapped for another fails above
    flat = {head: np.concatenate(found) for head, found in predictions.items()}
    assert not np.array_equal(flat["protonet"], flat["matchingnet"])
    assert not np.array_equal(flat["protonet"], flat["knn"])
    assert not np.array_equal(flat["matchingnet"], flat["knn"])


def _summary(main, served, tmp_path: Path, run: str, *extra: str) -> dict:
    path = tmp_path / f"{run}.json"
    assert main(["--server", served.address, "--run", run, *MD, "--json-summary", str(path), *extra]) == 0
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("learner", ["matchingnet", "maml", "protomaml", "relationnet"])
def test_an_episodic_learner_trains_to_the_same_first_loss_in_both_frameworks(served, tmp_path, torch_one_thread,
                                                                              learner):
    fixed = ["--model", learner, "--ways", "5", "--shots", "3", "--query", "3", "--train-episodes", "3",
             "--eval-episodes", "10", "--maml-steps", "2", "--maml-eval-steps", "1", "--maml-alpha", "0.05",
             *(["--batch-norm", "transductive", "--image-size", "32"] if learner == "relationnet" else [])]
    results = {framework: _summary(main, served, tmp_path, f"{learner}-{framework}", *fixed, *THREADS[framework])
               for framework, main in (("torch", torch_main), ("tf", tf_main))}
    first = {framework: result["train"]["curve"][0][1] for framework, result in results.items()}
    assert first["torch"] == pytest.approx(first["tf"], rel=1e-4), first
    evaluated = {framework: result["eval"]["folder"] for framework, result in results.items()}
    gap = abs(evaluated["torch"]["mean_accuracy"] - evaluated["tf"]["mean_accuracy"])
    assert gap <= max(evaluated["torch"]["ci95"], evaluated["tf"]["ci95"]), evaluated


@pytest.mark.slow
def test_knn_and_the_inference_only_variants_train_on_batches(served, tmp_path, torch_one_thread):
    common = ["--train-steps", "2", "--batch-size", "16", "--eval-episodes", "4", *THREADS["torch"]]
    runs = {"knn": ["--model", "knn"],
            "finetune": ["--model", "finetune", "--finetune-steps", "3", "--finetune-lr", "0.01",
                         "--finetune-optimizer", "adam", "--finetune-all-layers"],
            "inference-matchingnet": ["--model", "baseline", "--eval-learner", "matchingnet"],
            "inference-protomaml": ["--model", "baseline", "--eval-learner", "protomaml", "--maml-steps", "0",
                                    "--maml-eval-steps", "1", "--maml-alpha", "0.0614"]}
    with SamplerClient(served.address) as client:
        for run, flags in runs.items():
            summary = _summary(torch_main, served, tmp_path, run, *flags, *common)
            assert summary["train"]["unit"] == "batch" and summary["eval"]["folder"]["episodes"] == 4
            held = json.loads(client.get_report([run], "json"))
            assert run in json.dumps(held)
    with pytest.raises(SystemExit):  # batches have no ways
        parse_args("torch", _argv(served, "--model", "knn", "--ways", "5"))
    with pytest.raises(SystemExit):  # the MAML family normalises with each pass's own moments
        parse_args("torch", _argv(served, "--model", "maml", "--batch-norm", "running"))


@pytest.mark.slow
def test_finetune_evaluates_alike_in_both_frameworks(served, tmp_path, torch_one_thread):
    """From the same --init-seed and the same two batches, each framework's new heads (the same
    draws) finetuned on the same episodes: accuracies within each other's interval."""
    fixed = ["--model", "finetune", "--train-steps", "2", "--batch-size", "16", "--eval-episodes", "10",
             "--finetune-steps", "5", "--finetune-lr", "0.01", "--finetune-optimizer", "adam"]
    results = {framework: _summary(main, served, tmp_path, f"finetune-{framework}", *fixed, *THREADS[framework])
               for framework, main in (("torch", torch_main), ("tf", tf_main))}
    evaluated = {framework: result["eval"]["folder"] for framework, result in results.items()}
    gap = abs(evaluated["torch"]["mean_accuracy"] - evaluated["tf"]["mean_accuracy"])
    assert gap <= max(evaluated["torch"]["ci95"], evaluated["tf"]["ci95"]), evaluated
    assert evaluated["torch"]["mean_loss"] == pytest.approx(evaluated["tf"]["mean_loss"], rel=1e-2), evaluated


@pytest.fixture(scope="module")
def plain_first_loss(served, tmp_path_factory) -> float:
    """The plain linear head's first batch loss (torch), which every head form must change."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plain = _summary(torch_main, served, tmp_path_factory.mktemp("plain"), "head-plain", "--model", "knn",
                         "--train-steps", "2", "--batch-size", "16", "--eval-episodes", "2", *THREADS["torch"])
    finally:
        torch.set_num_threads(threads)
    return plain["train"]["curve"][0][1]


@pytest.mark.slow
@pytest.mark.parametrize("head", [["--classifier", "cosine", "--cosine-multiplier", "10", "--weight-norm"],
                                  ["--weight-norm"], ["--classifier", "cosine"]],
                         ids=["cosine-weight-norm", "linear-weight-norm", "cosine"])
def test_the_batch_heads_train_to_the_same_first_loss_in_both_frameworks(served, tmp_path, torch_one_thread, head,
                                                                         plain_first_loss):
    """The training head's forms (functional_classifiers.linear_classifier): from the same
    --init-seed, torch's and tf's first batch loss agree, weight norm's data-dependent init
    included (g, and the plain head's bias, from the first batch's features)."""
    fixed = ["--model", "knn", "--train-steps", "2", "--batch-size", "16", "--eval-episodes", "2", *head]
    name = "-".join(flag.strip("-") for flag in head)
    results = {framework: _summary(main, served, tmp_path, f"head-{name}-{framework}", *fixed, *THREADS[framework])
               for framework, main in (("torch", torch_main), ("tf", tf_main))}
    first = {framework: result["train"]["curve"][0][1] for framework, result in results.items()}
    assert first["torch"] == pytest.approx(first["tf"], rel=1e-4), first
    assert plain_first_loss != pytest.approx(first["torch"], rel=1e-3)  # the form changes the loss


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_relationnet_keeps_its_relation_module_with_the_best_backbone(served, tmp_path, torch_one_thread, framework):
    """The relation module is half of the model: kept with the best validated backbone and
    restored by --eval-only, so the test episodes' scores (their MSE) come out the same."""
    main = torch_main if framework == "torch" else tf_main
    common = ["--model", "relationnet", "--ways", "5", "--shots", "3", "--query", "3", "--train-episodes", "4",
              "--eval-episodes", "3", "--validate-every", "2", "--validate-sources", "folder",
              "--validate-episodes", "2", "--lr", "0.01", "--checkpoint-dir", str(tmp_path / framework),
              *THREADS[framework]]
    trained = _summary(main, served, tmp_path, f"relation-{framework}", *common)
    again = _summary(main, served, tmp_path, f"relation-{framework}", *common, "--eval-only")
    assert again["eval"]["folder"]["mean_loss"] == pytest.approx(trained["eval"]["folder"]["mean_loss"], rel=1e-6)
    untrained = _summary(main, served, tmp_path, f"relation-{framework}-untrained", *common[:-2 - len(
        THREADS[framework])], "--train-episodes", "0", *THREADS[framework])
    assert untrained["eval"]["folder"]["mean_loss"] != pytest.approx(trained["eval"]["folder"]["mean_loss"], rel=1e-4)
