"""Throwaway git repositories for the provenance tests: commits with a fixed identity, files
written by path."""

import subprocess

GIT_IDENTITY = ["-c", "user.name=pyrozoo-test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def git(root, *args):
    return subprocess.run(["git", *GIT_IDENTITY, *args], cwd=root, check=True, capture_output=True, text=True).stdout


def commit_all(root, message):
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD").strip()


def write(root, name, text):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
