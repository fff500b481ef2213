"""NetSA XML traffic matrices: the paper's example, round trips, malformed input."""

from __future__ import annotations

import pytest

from sdnmpi.core.pattern import Cell, Pattern, Phase
from sdnmpi.errors import FormatError
from sdnmpi.formats.netsa import dump_netsa, parse_netsa

PAPER = """<?xml version="1.0" encoding="UTF-8"?>
<traffic_matrix>
  <matrix id="100" name="MPI_Allreduce">
    <src_host>i9
      <dst_host>i1
        <num_bytes>42752734</num_bytes>
        <num_packets>35346</num_packets>
        <bandwidth intensive="true"></bandwidth>
      </dst_host>
      <dst_host>i2
        <num_bytes>9394</num_bytes>
        <num_packets>81</num_packets>
        <latency max_num_hops="2"></latency>
      </dst_host>
    </src_host>
  </matrix>
  <matrix id="101" name="plain">
    <src_host>a<dst_host>b<num_bytes>1</num_bytes><num_packets>1</num_packets></dst_host></src_host>
  </matrix>
</traffic_matrix>
"""


def test_paper_example():
    allreduce, plain = parse_netsa(PAPER)
    assert allreduce.name == "MPI_Allreduce" and allreduce.meta["netsa_id"] == "100"
    assert allreduce.hosts == ("i9", "i1", "i2")
    assert list(allreduce.phases[0].cells()) == [
        Cell(0, 1, 42752734, 35346, "bandwidth", 0),
        Cell(0, 2, 9394, 81, "latency", 2),
    ]
    assert plain.hosts == ("a", "b") and plain.total_bytes == 1


def test_round_trip():
    matrices = parse_netsa(PAPER)
    assert parse_netsa(dump_netsa(matrices)) == matrices


def test_writer_needs_host_level_patterns():
    p = Pattern("ranks", 2, (Phase.from_cells("x", [(0, 1, 1)]),))
    with pytest.raises(FormatError, match="rank-level"):
        dump_netsa([p])


def cell(body: str) -> str:
    inner = f"<src_host>a<dst_host>b{body}</dst_host></src_host>"
    return f'<traffic_matrix><matrix id="1">{inner}</matrix></traffic_matrix>'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (cell("<num_bytes>-4</num_bytes><num_packets>1</num_packets>"), "negative <num_bytes>"),
        (cell("<num_bytes>x</num_bytes><num_packets>1</num_packets>"), "not an integer"),
        (cell("<num_packets>1</num_packets>"), "missing <num_bytes>"),
        (
            cell("<num_bytes>1</num_bytes><num_packets>1</num_packets><colour/>"),
            "unexpected element <colour>",
        ),
        (
            cell(
                '<num_bytes>1</num_bytes><num_packets>1</num_packets><latency max_num_hops="-1"/>'
            ),
            "max_num_hops",
        ),
        (
            cell(
                '<num_bytes>1</num_bytes><num_packets>1</num_packets><bandwidth intensive="maybe"/>'
            ),
            "intensive='maybe'",
        ),
        (
            '<traffic_matrix><matrix id="1"><src_host>a<dst_host>b'
            "<num_bytes>1</num_bytes><num_packets>1</num_packets>"
            "</dst_host><dst_host>b<num_bytes>1</num_bytes><num_packets>1</num_packets></dst_host></src_host>"
            "</matrix></traffic_matrix>",
            "duplicate cell a -> b",
        ),
        ('<traffic_matrix><matrix id="1"/><matrix id="1"/></traffic_matrix>', "empty matrix"),
        ("<traffic_matrix/>", "no <matrix>"),
        ("<traffic_matrix><matrix", "malformed XML"),
        (
            '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x "y">]>'
            "<traffic_matrix>&x;</traffic_matrix>",
            "forbidden XML construct",
        ),
        (
            '<!DOCTYPE t SYSTEM "http://example.invalid/x.dtd"><traffic_matrix/>',
            "forbidden XML construct",
        ),
    ],
)
def test_malformed_xml_is_rejected(text: str, message: str):
    with pytest.raises(FormatError, match=message) as err:
        parse_netsa(text, source="cpd.xml")
    assert str(err.value).startswith("cpd.xml: ")
