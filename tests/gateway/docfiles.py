"""Small real documents built in the tests: PDFs written byte by byte, DOCX, XLSX and CSV by their libraries."""

import io
import zlib

# A 5x7 pixel font for the few characters the scanned-page tests draw.
GLYPHS = {
    "S": ["01111", "10000", "10000", "01110", "00001", "00001", "11110"],
    "C": ["01111", "10000", "10000", "10000", "10000", "10000", "01111"],
    "A": ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
    "N": ["10001", "11001", "10101", "10011", "10001", "10001", "10001"],
    "E": ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
    "D": ["11110", "10001", "10001", "10001", "10001", "10001", "11110"],
    "4": ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    "2": ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    " ": ["00000"] * 7,
}


def bitmap(text: str, scale: int = 12, margin: int = 40) -> tuple[int, int, bytes]:
    """(width, height, 8-bit gray pixels): black `text` on white, in the 5x7 font."""
    cell = 6 * scale
    width, height = margin * 2 + cell * len(text), margin * 2 + 7 * scale
    rows = [bytearray(b"\xff" * width) for _ in range(height)]
    for i, ch in enumerate(text):
        for gy, line in enumerate(GLYPHS[ch]):
            for gx, bit in enumerate(line):
                if bit == "1":
                    for y in range(margin + gy * scale, margin + (gy + 1) * scale):
                        x0 = margin + i * cell + gx * scale
                        rows[y][x0:x0 + scale] = b"\x00" * scale
    return width, height, b"".join(bytes(r) for r in rows)


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF from its numbered objects (1 is the catalog), with a correct xref table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def _stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s>>\nstream\n" % (len(data), extra) + data + b"\nendstream"


def pdf(pages: list) -> bytes:
    """A PDF with one page per item: a str is a text page (Helvetica), a (w, h, pixels) tuple a scanned page."""
    n = len(pages)
    # 1 catalog, 2 pages, 3 font, then per page: page, contents, [image]
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for item in pages:
        page_no = len(objects) + 1
        kids.append(b"%d 0 R" % page_no)
        if isinstance(item, str):
            lines = item.split("\n")
            text_ops = b"BT /F1 14 Tf 72 740 Td 18 TL " + b" ".join(
                b"(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1") + b") '"
                for line in lines) + b" ET"
            objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                           b"/Contents %d 0 R >>" % (page_no + 1))
            objects.append(_stream(text_ops))
        else:
            width, height, pixels = item
            shown_w, shown_h = 500, 500 * height // width
            objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /Im1 %d 0 R >> >> "
                           b"/Contents %d 0 R >>" % (page_no + 2, page_no + 1))
            objects.append(_stream(b"q %d 0 0 %d 56 400 cm /Im1 Do Q" % (shown_w, shown_h)))
            objects.append(_stream(zlib.compress(pixels), b"/Type /XObject /Subtype /Image /Width %d /Height %d "
                                   b"/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode " % (width, height)))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), n)
    return _pdf(objects)


def encrypted_pdf(text: str = "secret page", password: str = "hunter2") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf([text]))))
    writer.encrypt(user_password=password, owner_password=password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx(paragraphs: list[str], table: list[list[str]] | None = None, heading: str | None = None) -> bytes:
    from docx import Document

    document = Document()
    if heading:
        document.add_heading(heading, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx(sheets: dict[str, list[list]]) -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()
