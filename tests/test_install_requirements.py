"""tools/build/install_requirements.py: uv gets the sources pip would use."""

from tools.build.install_requirements import parse_pip_config, uv_arguments

PIP_CONFIG_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='{wheels}'
global.cert='/somewhere/else.crt'
global.constraint='{constraints}'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/not/this/one'
install.index-url='https://mirror.example/simple'
"""


def test_pip_settings_reach_uv_with_pips_precedence(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    text = PIP_CONFIG_LIST.format(wheels=wheels, constraints=constraints)
    settings = parse_pip_config(text)
    assert settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"  # PIP_CERT over global
    assert settings["find-links"] == str(wheels)
    args, env = uv_arguments(settings)
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}
    assert args == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        str(wheels),
        "--constraint",
        str(constraints),
    ]


def test_a_missing_folder_is_left_out_as_pip_ignores_it(tmp_path):
    args, env = uv_arguments({"find-links": str(tmp_path / "absent"), "constraint": "/no/file"})
    assert args == ["--index-strategy", "unsafe-best-match"] and env == {}
