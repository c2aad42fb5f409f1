"""train: the node trains a real model at its peers' speed, its replicas bit for bit alike."""

from burnin.model.verdict import assert_passed


def test_train(node, burnin_run):
    assert_passed(burnin_run.verdict("train", node))
