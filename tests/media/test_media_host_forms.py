"""The private-address guard for media URLs holds for an IP literal in every form some URL parser
or the C library accepts (legacy numeric IPv4, trailing dot, percent-encoded, full-width, every
IPv6 form that embeds a loopback address, userinfo tricks), on the first URL and on a redirect,
whatever the aiohttp version: each test runs with the installed aiohttp and with its connector
made as trusting as aiohttp before 3.14.2 (a legacy numeric host connected to without asking the
resolver). A refused URL never reaches the server it names. File URLs with a NUL byte are 400s."""

from __future__ import annotations

import pytest

from tests.media.media_server import MediaServer
from vllm_pyfrontend.media import MediaError, MediaLoader, MediaPolicy
from vllm_pyfrontend.media.policy import host_address

pytest.importorskip("PIL")

FILES = {"x.png": (b"\x89PNG\r\n\x1a\n not really", "image/png")}

# Hosts that all stand for a loopback or unspecified address (`{p}`: the target server's port).
LOOPBACK_FORMS = [
    "2130706433", "127.1", "0177.0.0.1", "0x7f.1", "0x7F.0.0.1", "0x7f000001", "017700000001",
    "127.000.000.001", "0177.1", "127.0.0.1.", "2130706433.", "0x7f.1.", "%31%32%37.0.0.1", "127.0.0.%31",
    "\uff11\uff12\uff17.0.0.1", "127\u30020\u30020\u30021", "0", "0.0.0.0",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:7f00:1]", "[::FFFF:127.0.0.1]", "[::1]",
    "[0:0:0:0:0:0:0:1]", "[::127.0.0.1]", "[::ffff:0:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]",
]
USERINFO_TRICKS = [
    "http://images.example.com@2130706433:{p}/files/x.png",
    "http://images.example.com:443@127.1:{p}/files/x.png",
    "http://127.0.0.1:{p}#@images.example.com/files/x.png",
    "http://1.1.1.1 &@0x7f.1:{p}/files/x.png",
    "http://user:pass@[::ffff:127.0.0.1]:{p}/files/x.png",
]


@pytest.fixture(scope="module")
def target():
    with MediaServer(FILES) as s:  # 127.0.0.1: what every form names; never to be reached
        yield s


@pytest.fixture(scope="module")
def redirector():
    with MediaServer(FILES, host="127.0.0.2") as s:  # the one private address allowed below
        yield s


@pytest.fixture(params=["installed aiohttp", "aiohttp before 3.14.2"])
def aiohttp_version(request, monkeypatch):
    if request.param != "installed aiohttp":
        import aiohttp.connector

        if hasattr(aiohttp.connector, "is_canonical_ipv4_address"):
            monkeypatch.setattr(aiohttp.connector, "is_canonical_ipv4_address", lambda host: True)
    return request.param


@pytest.fixture
async def loader():
    ld = MediaLoader(MediaPolicy.from_env(allowed_private_networks=["127.0.0.2/32"], fetch_timeout_s=5))
    yield ld
    await ld.close()


async def _refused(loader: MediaLoader, url: str, status: int = 403) -> MediaError:
    with pytest.raises(MediaError) as e:
        await loader.load_image(url)
    assert e.value.status == status, (url, e.value.message)
    return e.value


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_every_form_is_the_address_it_stands_for(host):
    address = host_address(host)
    assert address is not None and not MediaPolicy().address_allowed(str(address)), (host, address)


async def test_every_form_is_refused_and_never_fetched(target, loader, aiohttp_version):
    for host in LOOPBACK_FORMS:
        err = await _refused(loader, f"http://{host}:{target.port}/files/x.png")
        assert "not allowed" in err.message, err.message
    for url in USERINFO_TRICKS:
        await _refused(loader, url.format(p=target.port))
    # not an address, and never given to a resolver to interpret
    await _refused(loader, f"http://[::ffff:127.1]:{target.port}/files/x.png", 400)
    assert target.hits == []


async def test_redirects_to_every_form_are_refused(target, redirector, loader, aiohttp_version):
    before = len(redirector.hits)
    for host in LOOPBACK_FORMS:
        await _refused(loader, f"{redirector.base}/redirect?to=http://{host}:{target.port}/files/x.png")
    assert target.hits == []
    assert len(redirector.hits) - before == len(LOOPBACK_FORMS)  # the first hop was allowed and made


async def test_a_public_address_in_a_legacy_form_is_400_not_fetched(loader, aiohttp_version):
    # 8.8.8.8 as 134744072: allowed as an address, refused as a spelling (as aiohttp >= 3.14.2)
    err = await _refused(loader, "http://134744072/x.png", 400)
    assert "not a canonical IPv4 address; write it as 8.8.8.8" in err.message


async def test_file_urls_with_a_nul_byte_are_400(tmp_path):
    (tmp_path / "x.png").write_bytes(FILES["x.png"][0])
    ld = MediaLoader(MediaPolicy.from_env(allowed_local_media_path=str(tmp_path)))
    try:
        for url in (f"file://{tmp_path}/x.png%00", f"file://{tmp_path}/x%00.png", f"file://{tmp_path}%00/../x.png",
                    "file:///%00"):
            err = await _refused(ld, url, 400)
            assert "NUL byte" in err.message
    finally:
        await ld.close()
