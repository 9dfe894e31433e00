"""Data (§5.1): safe downloads, Multi30k loading from a folder or the cache, the built-in corpus.

No test touches the network or needs Multi30k: downloads come from a loopback HTTP server that
serves small fake files from tmp_path, and the pinned hashes are replaced with those of the fakes
(`checksums=`).
"""

import functools
import gzip
import hashlib
import http.server
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import FullFile

from annotated_transformer.data import (
    _ADJECTIVES,
    _ANIMALS,
    BUILTIN_SPLITS,
    CACHE_ENV,
    CORPORA,
    LANGUAGES,
    MULTI30K_BASE_URL,
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    DataError,
    _noun_phrase,
    builtin_corpus,
    corpus,
    default_cache_dir,
    download_file,
    multi30k,
    multi30k_path,
    sha256_file,
)
from annotated_transformer.helpers.errors import Setting

# SHA-256 of "\n".join(german + "\t" + english) over builtin_corpus("train"): any change to the
# grammar, the random choices or the split sizes changes it. If the change is intended, update it.
BUILTIN_TRAIN_SHA256 = "94b352cc723add2f2c2033a19b24cbde581451fc28a1955b22bda95664a6af76"

FAKE = {  # a fake Multi30k: split -> (German lines, English lines)
    "train": (["Ein Hund läuft.", "Zwei Katzen schlafen.", "Eine Frau liest."],
              ["A dog runs.", "Two cats sleep.", "A woman reads."]),
    "val": (["Ein Mann singt."], ["A man sings."]),
    "test_2016_flickr": (["Ein Kind lacht.", "Ein Vogel fliegt."], ["A child laughs.", "A bird flies."]),
}


def gz(lines: list[str]) -> bytes:
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0)


def fake_files() -> dict[str, bytes]:
    return {f"{split}.{language}.gz": gz(texts[i])
            for split, texts in FAKE.items() for i, language in enumerate(LANGUAGES)}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# --- a loopback HTTP server ---------------------------------------------------------------------


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; under /truncated/ it announces 1,000 bytes, sends 10 and closes."""

    def do_GET(self):
        if self.path.startswith("/truncated/"):
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def server(tmp_path):
    """(folder served, base URL): files written to the folder are downloadable."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(Handler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def fake_multi30k(server):
    """The fake Multi30k served over HTTP: (base URL, checksums of the fake files)."""
    served, base_url = server
    files = fake_files()
    for name, data in files.items():
        (served / name).write_bytes(data)
    return base_url, {name: sha(data) for name, data in files.items()}


@pytest.fixture
def closed_port_url():
    """A URL on which nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


# --- download_file -------------------------------------------------------------------------------


def test_sha256_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert sha256_file(path) == sha(b"abc") == sha256_file(str(path))


def test_download_checks_the_hash(server, tmp_path):
    served, base_url = server
    (served / "a.txt").write_bytes(b"hello\n")
    destination = tmp_path / "cache" / "sub" / "a.txt"
    assert download_file(base_url + "a.txt", destination, sha(b"hello\n")) == destination
    assert destination.read_bytes() == b"hello\n"
    assert files_in(destination.parent) == ["a.txt"]  # no temporary file left
    # without a hash, and to a str destination
    assert download_file(base_url + "a.txt", str(tmp_path / "b.txt")).read_bytes() == b"hello\n"


def test_download_of_a_corrupt_file_saves_nothing(server, tmp_path):
    served, base_url = server
    (served / "train.de.gz").write_bytes(b"not what we expected")
    expected = sha(b"the real file")
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as info:
        download_file(base_url + "train.de.gz", cache / "train.de.gz", expected)
    message = str(info.value)
    assert "train.de.gz" in message
    assert expected in message and sha(b"not what we expected") in message
    assert files_in(cache) == []


def test_interrupted_transfer_is_detected(server, tmp_path):
    _, base_url = server
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="interrupted after 10 of 1,000 bytes"):
        download_file(base_url + "truncated/train.de.gz", cache / "train.de.gz")
    assert files_in(cache) == []


def test_missing_file_on_the_server(server, tmp_path):
    _, base_url = server
    with pytest.raises(DataError, match="HTTP 404"):
        download_file(base_url + "nothing.gz", tmp_path / "nothing.gz")
    assert files_in(tmp_path) == ["served"]


def test_unwritable_destination(server, tmp_path):
    _, base_url = server
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(DataError, match="cannot write to"):
        download_file(base_url + "a.txt", tmp_path / "a-file" / "a.txt")


def test_unreachable_server_says_where_to_put_the_files(closed_port_url, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as info:
        multi30k("val", cache_dir=cache, base_url=closed_port_url)
    message = str(info.value)
    assert closed_port_url + "val.de.gz" in message and closed_port_url + "val.en.gz" in message
    assert str(cache) in message and message.endswith("or pass a folder that holds them as root.")
    assert Setting("root") in info.value.settings  # the command line says it as --data-dir
    assert files_in(cache) == []



def test_a_full_disk_while_downloading_says_so_and_saves_nothing(server, tmp_path, monkeypatch):
    served, base_url = server
    (served / "train.de.gz").write_bytes(bytes(200_000))
    (tmp_path / "cache").mkdir()
    # the downloads' temporary file, on a disk with 1,000 bytes left
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: FullFile(fd, "wb", room=1000))
    destination = tmp_path / "cache" / "train.de.gz"
    with pytest.raises(DataError) as info:
        download_file(base_url + "train.de.gz", destination)
    assert str(info.value) == (
        f"the disk is full: {destination} could not be written (No space left on device). Nothing was "
        f"saved. Free some space on the disk of {destination.parent}, or keep the data on another disk "
        f"(for the data cache: the environment variable {CACHE_ENV})."
    )
    assert files_in(tmp_path / "cache") == []


def test_partial_downloads_of_dead_processes_are_removed_when_a_download_starts(server, tmp_path):
    served, base_url = server
    (served / "train.de.gz").write_bytes(b"the file")
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # the id of a process that has ended
    left = [f".train.de.gz.{dead}.k3j_9x2a.part", ".train.de.gz.a8f3kq0z.part"]  # killed; an older name
    running = f".train.de.gz.{os.getppid()}.q1w2e3r4.part"  # another download, still going on
    others = [running, ".val.de.gz.123.abcdefgh.part", ".train.de.12.abcdefgh.part", "notes.part"]
    for name in left + others:
        (cache / name).write_bytes(b"part of a file")
    download_file(base_url + "train.de.gz", cache / "train.de.gz")
    assert files_in(cache) == sorted(["train.de.gz", *others])

# --- Multi30k: the cache --------------------------------------------------------------------------


def test_multi30k_downloads_caches_and_reads(fake_multi30k, tmp_path, closed_port_url):
    base_url, checksums = fake_multi30k
    cache = tmp_path / "cache"
    pairs = multi30k("train", cache_dir=cache, base_url=base_url, checksums=checksums)
    assert pairs == list(zip(*FAKE["train"], strict=True))
    assert files_in(cache) == ["train.de.gz", "train.en.gz"]
    # Cached: no network needed any more.
    again = multi30k("train", cache_dir=cache, base_url=closed_port_url, checksums=checksums, download=False)
    assert again == pairs
    assert multi30k_path("train", "en", cache_dir=cache, checksums=checksums) == cache / "train.en.gz"


def test_default_cache_folder_and_environment(fake_multi30k, tmp_path, monkeypatch):
    base_url, checksums = fake_multi30k
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache"
    assert not (tmp_path / "env-cache").exists()  # not created by asking
    assert multi30k("val", base_url=base_url, checksums=checksums) == [("Ein Mann singt.", "A man sings.")]
    assert files_in(tmp_path / "env-cache" / "multi30k") == ["val.de.gz", "val.en.gz"]
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "annotated_transformer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "annotated_transformer"


def test_corrupt_cached_file_is_downloaded_again(fake_multi30k, tmp_path):
    base_url, checksums = fake_multi30k
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "val.de.gz").write_bytes(b"corrupted")
    assert multi30k("val", cache_dir=cache, base_url=base_url, checksums=checksums)[0][0] == "Ein Mann singt."
    assert sha256_file(cache / "val.de.gz") == checksums["val.de.gz"]


def test_corrupt_cached_file_is_reported_without_download(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "val.de.gz").write_bytes(b"corrupted")
    with pytest.raises(DataError) as info:
        multi30k_path("val", "de", cache_dir=cache, download=False)
    message = str(info.value)
    assert "corrupt" in message and MULTI30K_SHA256["val.de.gz"] in message and sha(b"corrupted") in message
    assert "Delete it, and download=True downloads it again" in message
    assert info.value.settings == [Setting("download", True)]


def test_download_false_with_nothing_cached(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as info:
        multi30k("train", cache_dir=cache, download=False)
    message = str(info.value)
    assert "train.de.gz" in message and "download=False was given: download=True downloads it" in message
    assert MULTI30K_BASE_URL + "train.de.gz" in message and MULTI30K_BASE_URL + "train.en.gz" in message
    assert str(cache) in message and message.endswith("as root.")
    assert info.value.settings == [Setting("download", False), Setting("download", True), Setting("root")]
    assert not cache.exists()


def test_unpinned_files_must_be_complete_gzip(server, tmp_path):
    """The 2017/2018 test sets have no pinned hash: a truncated gzip file is rejected and removed."""
    served, base_url = server
    (served / "test_2018_flickr.de.gz").write_bytes(gz(["Ein Hund."] * 200)[:-30])
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="not a complete gzip file"):
        multi30k_path("test_2018_flickr", "de", cache_dir=cache, base_url=base_url)
    assert files_in(cache) == []
    (served / "test_2018_flickr.de.gz").write_bytes(gz(["Ein Hund."]))
    (served / "test_2018_flickr.en.gz").write_bytes(gz(["A dog."]))
    assert multi30k("test_2018_flickr", cache_dir=cache, base_url=base_url) == [("Ein Hund.", "A dog.")]


# --- Multi30k: a local folder (root=) -----------------------------------------------------------


def test_root_with_gzip_and_plain_files(tmp_path):
    root = tmp_path / "raw"
    root.mkdir()
    files = fake_files()
    for name in ("train.de.gz", "train.en.gz"):
        (root / name).write_bytes(files[name])
    checksums = {name: sha(data) for name, data in files.items()}
    assert multi30k("train", root=root, checksums=checksums) == list(zip(*FAKE["train"], strict=True))
    # Uncompressed files, one with Windows line ends and no final newline.
    (root / "val.de").write_text("Ein Mann singt.\r\nEin Hund bellt.", encoding="utf-8")
    (root / "val.en").write_text("A man sings.\nA dog barks.\n", encoding="utf-8")
    expected = [("Ein Mann singt.", "A man sings."), ("Ein Hund bellt.", "A dog barks.")]
    assert multi30k("val", root=str(root)) == expected
    assert not (tmp_path / "cache").exists()


def test_wrong_file_in_root_is_reported(tmp_path):
    root = tmp_path / "raw"
    root.mkdir()
    (root / "train.de.gz").write_bytes(gz(["Etwas anderes."]))
    (root / "train.en.gz").write_bytes(gz(["Something else."]))
    with pytest.raises(DataError) as info:
        multi30k("train", root=root)  # the real pinned hashes
    message = str(info.value)
    assert str(root / "train.de.gz") in message and "different version" in message
    assert MULTI30K_SHA256["train.de.gz"] in message


def test_missing_file_in_root(tmp_path):
    with pytest.raises(DataError, match=r"neither val\.de\.gz nor val\.de is in .* \(root\)\. To fix"):
        multi30k("val", root=tmp_path)
    with pytest.raises(DataError) as info:
        multi30k("val", root=tmp_path / "nowhere")
    assert str(info.value) == (
        f"root={str(tmp_path / 'nowhere')!r} is not a folder. Pass a folder that holds the Multi30k files "
        f"(val.de.gz, val.en.gz, ...) as root, or use the cache: root=None takes them from there.")


def test_line_count_mismatch(tmp_path):
    (tmp_path / "val.de").write_text("Eins.\nZwei.\n", encoding="utf-8")
    (tmp_path / "val.en").write_text("One.\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"has 2 lines but .* has 1"):
        multi30k("val", root=tmp_path)


def test_unreadable_file(tmp_path):
    (tmp_path / "val.de").write_bytes(b"\xff\xfe not utf-8")
    (tmp_path / "val.en").write_text("One.\n", encoding="utf-8")
    with pytest.raises(DataError, match="UTF-8"):
        multi30k("val", root=tmp_path)


# --- names ----------------------------------------------------------------------------------------


def test_unknown_names_list_the_valid_ones(tmp_path):
    with pytest.raises(DataError, match="test_2016_flickr, test_2017_flickr"):
        multi30k("test_2019", cache_dir=tmp_path, download=False)
    with pytest.raises(DataError, match='called "val"'):
        multi30k("valid", cache_dir=tmp_path, download=False)
    with pytest.raises(DataError, match="de, en"):
        multi30k_path("train", "fr", cache_dir=tmp_path, download=False)
    with pytest.raises(DataError, match="builtin, multi30k"):
        corpus("wmt14", "train")
    with pytest.raises(DataError, match="train, val, test"):
        corpus("builtin", "validation")
    with pytest.raises(DataError, match="unknown option"):
        corpus("builtin", "train", rot=True)
    assert MULTI30K_SPLITS[:3] == ("train", "val", "test_2016_flickr")
    assert CORPORA == ("builtin", "multi30k") and BUILTIN_SPLITS == ("train", "val", "test")


def test_corpus_dispatches(tmp_path):
    root = tmp_path / "raw"
    root.mkdir()
    files = fake_files()
    for name, data in files.items():
        (root / name).write_bytes(data)
    checksums = {name: sha(data) for name, data in files.items()}
    test = corpus("multi30k", "test", root=root, checksums=checksums)
    assert test == list(zip(*FAKE["test_2016_flickr"], strict=True))
    assert corpus("multi30k", "val", root=root, checksums=checksums) == [("Ein Mann singt.", "A man sings.")]
    assert corpus("builtin", "val") == builtin_corpus("val")
    assert corpus("builtin", "test", root=root) == builtin_corpus("test")  # Multi30k options are ignored


# --- the built-in corpus ------------------------------------------------------------------------


def test_builtin_corpus_is_deterministic():
    train = builtin_corpus("train")
    assert builtin_corpus("train") == train
    builtin_corpus("train").clear()  # callers get a copy: changing it changes nothing
    assert builtin_corpus("train") == train
    joined = "\n".join(german + "\t" + english for german, english in train)
    assert sha(joined.encode("utf-8")) == BUILTIN_TRAIN_SHA256


def test_builtin_corpus_splits():
    splits = {split: builtin_corpus(split) for split in BUILTIN_SPLITS}
    assert {split: len(pairs) for split, pairs in splits.items()} == {"train": 5000, "val": 500, "test": 500}
    assert builtin_corpus() == splits["train"]
    seen: set[str] = set()
    for pairs in splits.values():
        sentences = [sentence for pair in pairs for sentence in pair]
        assert len(set(sentences)) == len(sentences)  # no duplicates within a split
        assert not seen & set(sentences)  # nor across splits, German or English
        seen |= set(sentences)
    for german, english in splits["train"]:
        for text in (german, english):
            assert text[0].isupper() and text.endswith(".") and "  " not in text and text == text.strip()


MASCULINE = {"Hund": "dog", "Ball": "ball", "Apfel": "apple", "Tisch": "table", "Mann": "man"}
NEUTER = {"Kind", "Buch", "Auto", "Haus", "Pferd"}
CONJUNCTIONS = {"weil", "obwohl", "während", "Weil", "Obwohl", "Während"}


def test_builtin_accusative_masculine_objects():
    """'The man sees the dog.' is 'Der Mann sieht den Hund.' (or 'einen Hund'), never 'der Hund'."""
    found = 0
    for german, english in builtin_corpus("train"):
        match = re.fullmatch(r"(?:The|A|An) [\w ]+? \w+s? (the|a) (\w+)\.", english)
        if match and match[2] in MASCULINE.values() and " with " not in english:
            noun = next(de for de, en in MASCULINE.items() if en == match[2])
            article = "den" if match[1] == "the" else "einen"
            assert re.search(rf"\b{article} {noun}\b", german), (german, english)
            assert not re.search(rf"\b(der|ein) {noun}\b", german), (german, english)  # not nominative
            found += 1
    assert found >= 20


def test_builtin_adjective_declension():
    """Masculine: der große / ein großer / den großen / einen großen; neuter: das große / ein großes."""
    endings = {"der": "e", "ein": "er", "den": "en", "einen": "en", "dem": "en", "einem": "en"}
    neuter_endings = {"das": "e", "ein": "es", "dem": "en", "einem": "en"}
    checked = 0
    for german, _ in builtin_corpus("train"):
        for article, adjective, noun in re.findall(r"\b(\w+) ([a-zäöüß]+) ([A-ZÄÖÜ]\w*)\b", german):
            article = article.lower()
            table = endings if noun in MASCULINE else neuter_endings if noun in NEUTER else None
            if table is None or article not in table:
                continue
            assert adjective.endswith(table[article]) and not adjective.endswith(table[article] + "n"), german
            if table[article] == "e":
                assert not adjective.endswith(("en", "er", "es")), german
            checked += 1
    assert checked > 100


FINITE = {  # third person singular and plural of every verb of the grammar, and the auxiliary
    "sieht", "sehen", "mag", "mögen", "sucht", "suchen", "findet", "finden", "hört", "hören", "malt", "malen",
    "braucht", "brauchen", "trägt", "tragen", "kauft", "kaufen", "zeichnet", "zeichnen", "beobachtet",
    "beobachten", "vergisst", "vergessen", "hält", "halten", "wäscht", "waschen", "kennt", "kennen",
    "hat", "haben",
}
ADVERBS = {"Heute": "Today", "Hier": "Here", "Dort": "There", "Manchmal": "Sometimes"}


def test_builtin_word_order_and_agreement():
    counts = dict.fromkeys(("main", "adverb", "subordinate", "fronted clause", "plural", "singular"), 0)
    for german, english in builtin_corpus("train"):
        words = german.rstrip(".").replace(",", " ,").split()
        comma = words.index(",") if "," in words else None
        if words[0] in CONJUNCTIONS:  # Weil der Hund die Katze sieht, sucht der Mann den Ball.
            assert words[comma - 1] in FINITE and words[comma + 1] in FINITE, german  # verb last; verb second
            counts["fronted clause"] += 1
        elif comma is not None:  # Der Mann sieht den Hund, weil der Hund die Katze sieht.
            assert words[comma + 1] in CONJUNCTIONS and words[-1] in FINITE, german  # verb last
            counts["subordinate"] += 1
        if words[0] in ADVERBS:  # Heute sieht der Mann den Hund. -> Today the man sees the dog.
            assert words[1] in FINITE and english.split()[0] == ADVERBS[words[0]], german
            counts["adverb"] += 1
        elif words[0] not in CONJUNCTIONS:  # subject first, then the finite verb
            noun = next(i for i in range(1, len(words)) if words[i][0].isupper())
            assert words[noun + 1] in FINITE, german
            counts["main"] += 1
            if words[0] in {"Zwei", "Drei", "Vier"}:  # plural subject, plural verb (sehen, haben)
                assert words[noun + 1].endswith("en"), german
                counts["plural"] += 1
            elif words[0] in {"Der", "Das", "Ein", "Eine"}:  # singular subject (sieht, hat)
                assert not words[noun + 1].endswith("en"), german
                counts["singular"] += 1
            if words[noun + 1] in {"hat", "haben"} and comma is None:  # perfect: participle last
                assert words[-1] not in {"hat", "haben"} and words[-1].islower(), german
    assert min(counts.values()) >= 50, counts


def test_noun_phrase_plural_of_a_has_no_article():
    """German and English have no plural indefinite article: the plural of "a small cat" ("eine
    kleine Katze") is "small cats" ("kleine Katzen"), the adjective with its strong ending."""
    dog, cat, small = _ANIMALS[0], _ANIMALS[1], _ADJECTIVES[1]
    assert _noun_phrase(cat, "nom", "a", True, small) == ("kleine Katzen", "small cats")
    assert _noun_phrase(cat, "dat", "a", True, small) == ("kleinen Katzen", "small cats")
    assert _noun_phrase(dog, "acc", "a", True) == ("Hunde", "dogs")
    assert _noun_phrase(dog, "dat", "a", True, small) == ("kleinen Hunden", "small dogs")
    assert _noun_phrase(dog, "acc", "a", False, small) == ("einen kleinen Hund", "a small dog")  # unchanged
    with pytest.raises(ValueError, match="plural"):  # "zwei Hund": a number needs the plural
        _noun_phrase(dog, "nom", "two", False)


def test_builtin_dative_after_mit():
    checked = 0
    for german, _ in builtin_corpus("train"):
        for article, rest in re.findall(r"\bmit (\w+) ((?:[a-zäöüß]+ )?[A-ZÄÖÜ]\w*)", german):
            assert article in {"dem", "der", "den", "einem", "einer", "zwei", "drei", "vier"}, german
            noun = rest.split()[-1]
            if article == "den" or article in {"zwei", "drei", "vier"}:  # dative plural ends in -n or -s
                assert noun.endswith(("n", "s")), german
            checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    ("name", "split", "message"),
    [
        ("builtin", ["train"], r"unknown split \['train'\] of the built-in corpus; the splits are: train"),
        ("builtin", None, "unknown split None of the built-in corpus"),
        ("multi30k", ["val"], r"unknown Multi30k split \['val'\]; the splits are: train, val, test_2016"),
        (None, "train", "unknown corpus None; the corpora are: builtin, multi30k"),
        (["builtin"], "train", r"unknown corpus \['builtin'\]"),
    ],
)
def test_a_corpus_name_or_split_of_the_wrong_type_is_refused_by_name(name, split, message, tmp_path):
    with pytest.raises(DataError, match=message) as info:
        corpus(name, split, cache_dir=tmp_path, download=False)
    assert "\n" not in str(info.value)

