"""Documents -> readable text: PDF (pypdf; scanned pages via pypdfium2), DOCX, XLSX, CSV, plain text.

Pure functions, no Django, no I/O but the optional OCR subprocess; the documents gate
(gateway.gates.documents) finds the parts, calls `extract` in a worker thread and cuts
the text to the window. A page of a PDF with no text layer is rendered to a PNG: sent as
an image where the route takes images, else read by OCR (`tesseract`, Debian's
tesseract-ocr, when it is on PATH), else replaced by a note that it could not be read.
A corrupt, encrypted or unknown document raises DocumentError with a message for the client.
"""

import csv
import io
import shutil
import struct
import subprocess
import zipfile
import zlib
from dataclasses import dataclass, field

PDF, DOCX, XLSX, CSV, TEXT = "pdf", "docx", "xlsx", "csv", "text"
LABELS = {PDF: "PDF", DOCX: "DOCX", XLSX: "XLSX", CSV: "CSV", TEXT: "text"}
MEDIA_TYPES = {
    "application/pdf": PDF,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": DOCX,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": XLSX,
    "text/csv": CSV,
    "application/csv": CSV,
}
EXTENSIONS = {"pdf": PDF, "docx": DOCX, "xlsx": XLSX, "xlsm": XLSX, "csv": CSV,
              "txt": TEXT, "md": TEXT, "json": TEXT, "log": TEXT, "xml": TEXT, "html": TEXT, "yaml": TEXT, "yml": TEXT}
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted OOXML and old .doc/.xls


class DocumentError(Exception):
    """The document cannot be read; the message says why, for the client."""


@dataclass
class Extracted:
    """A document's text, and the PNG page images the route may show instead of OCR."""

    kind: str
    text: str
    pages: int | None = None
    images: list[tuple[int, bytes]] = field(default_factory=list)  # (page number, PNG)
    notes: list[str] = field(default_factory=list)


@dataclass
class Options:
    images: bool = False            # the route takes images: scanned pages are sent as images
    max_scanned_pages: int = 20
    render_dpi: int = 150
    ocr_dpi: int = 300
    ocr_command: str = "tesseract"
    ocr_languages: str = "eng"
    ocr_timeout: float = 60.0


def detect(data: bytes, media_type: str = "", filename: str = "") -> str:
    """The document's kind, by its bytes first, then its media type, then its file name."""
    if data[:5] == b"%PDF-" or data[:1024].lstrip()[:5] == b"%PDF-":
        return PDF
    if data[:8] == OLE2_MAGIC:
        raise DocumentError("is an encrypted (password-protected) Office file or an old .doc/.xls file; "
                            "send it as PDF, DOCX or XLSX without a password")
    if data[:4] == b"PK\x03\x04":
        try:
            names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
        except zipfile.BadZipFile as exc:
            raise DocumentError(f"is a damaged ZIP (Office) file: {exc}")
        if "word/document.xml" in names:
            return DOCX
        if "xl/workbook.xml" in names:
            return XLSX
        raise DocumentError("is a ZIP file that is neither DOCX nor XLSX")
    media_type = (media_type or "").split(";")[0].strip().lower()
    if media_type in MEDIA_TYPES:
        kind = MEDIA_TYPES[media_type]
    elif media_type.startswith("text/") or media_type in ("application/json", "application/xml"):
        kind = TEXT
    else:
        kind = EXTENSIONS.get(filename.rsplit(".", 1)[-1].lower() if "." in filename else "", "")
    if kind in (PDF, DOCX, XLSX):
        raise DocumentError(f"says it is {LABELS[kind]}, but its bytes are not a {LABELS[kind]} file (damaged?)")
    if kind in (CSV, TEXT):
        return kind
    if b"\x00" not in data[:8192]:
        try:
            data[:65536].decode("utf-8")
            return TEXT
        except UnicodeDecodeError as exc:
            if exc.start >= 65530:  # a character cut by the sample's end
                return TEXT
    raise DocumentError(f"has a type this gateway cannot read ({media_type or 'unknown'}); "
                        "send PDF, DOCX, XLSX, CSV or plain text")


def extract(data: bytes, kind: str, options: Options | None = None) -> Extracted:
    options = options or Options()
    try:
        if kind == PDF:
            return _pdf(data, options)
        if kind == DOCX:
            return Extracted(DOCX, _docx(data))
        if kind == XLSX:
            return Extracted(XLSX, _xlsx(data))
        if kind == CSV:
            return Extracted(CSV, _csv(decode_text(data)))
        return Extracted(TEXT, decode_text(data))
    except DocumentError:
        raise
    except Exception as exc:  # the libraries raise many kinds of errors on damaged files
        raise DocumentError(f"could not be read as {LABELS[kind]} (damaged?): {type(exc).__name__}: {exc}")


def decode_text(data: bytes) -> str:
    for encoding in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            pass
    return data.decode("cp1252", errors="replace")


# -- PDF --------------------------------------------------------------------------------------


def _pdf(data: bytes, options: Options) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # many PDFs are "encrypted" with an empty password
            except Exception:
                opened = 0
            if not opened:
                raise DocumentError("is an encrypted (password-protected) PDF; send it without a password")
        pages = list(reader.pages)
    except (PdfReadError, FileNotDecryptedError, ValueError, KeyError, TypeError) as exc:
        raise DocumentError(f"could not be read as PDF (damaged?): {exc}")
    texts, scanned = [], []
    for number, page in enumerate(pages, 1):
        try:
            text = page.extract_text() or ""
        except Exception:
            text = ""
        text = text.strip()
        if not text:
            scanned.append(number)
        texts.append(text)
    result = Extracted(PDF, "", pages=len(pages))
    readings = _scanned_pages(data, scanned, options, result) if scanned else {}
    parts = []
    for number, text in enumerate(texts, 1):
        parts.append(f"--- page {number} ---")
        if number in readings:
            parts.append(readings[number])
        elif text:
            parts.append(text)
    result.text = "\n".join(parts)
    return result


def _scanned_pages(data: bytes, numbers: list[int], options: Options, result: Extracted) -> dict[int, str]:
    """Pages without a text layer: images for the route, or OCR text, or a note. -> {page: text}"""
    import pypdfium2

    ocr = None if options.images else shutil.which(options.ocr_command)
    readings = {}
    document = pypdfium2.PdfDocument(data)
    try:
        for count, number in enumerate(numbers):
            if count >= options.max_scanned_pages:
                readings[number] = (f"[page {number} has no text layer; it was not read: only the first "
                                    f"{options.max_scanned_pages} such pages are]")
                continue
            page = document[number - 1]
            if options.images:
                png = render_png(page, options.render_dpi, grayscale=False)
                result.images.append((number, png))
                readings[number] = f"[page {number} is a scanned page with no text layer: it follows as an image]"
            elif ocr:
                text = run_ocr(ocr, render_png(page, options.ocr_dpi, grayscale=True), options)
                readings[number] = (f"[page {number} is a scanned page; its text was read by OCR and may contain errors]\n"
                                    + (text or "[OCR found no text on this page]"))
            else:
                readings[number] = (f"[page {number} is a scanned page with no text layer; it could not be read: "
                                    "no OCR is installed on the gateway]")
            page.close()
    finally:
        document.close()
    return readings


def render_png(page, dpi: int, grayscale: bool) -> bytes:
    bitmap = page.render(scale=dpi / 72, grayscale=grayscale, rev_byteorder=True)
    try:
        return png_bytes(bytes(bitmap.buffer), bitmap.width, bitmap.height, bitmap.stride, bitmap.n_channels)
    finally:
        bitmap.close()


def png_bytes(pixels: bytes, width: int, height: int, stride: int, channels: int) -> bytes:
    """A PNG of 8-bit gray (1 channel) or RGB (3) rows; `stride` bytes per row in `pixels`."""
    color_type = {1: 0, 3: 2}[channels]
    row_bytes = width * channels
    raw = b"".join(b"\x00" + pixels[y * stride: y * stride + row_bytes] for y in range(height))

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def run_ocr(command: str, png: bytes, options: Options) -> str:
    try:
        done = subprocess.run([command, "stdin", "stdout", "-l", options.ocr_languages], input=png,
                              capture_output=True, timeout=options.ocr_timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"[OCR failed: {exc}]"
    if done.returncode != 0:
        return f"[OCR failed: {done.stderr.decode('utf-8', 'replace').strip()[:300]}]"
    return done.stdout.decode("utf-8", "replace").strip()


# -- Office and tables ------------------------------------------------------------------------


def _docx(data: bytes) -> str:
    from docx import Document
    from docx.table import Table

    document = Document(io.BytesIO(data))
    lines = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [" ".join(cell.text.split()) for cell in row.cells]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
            continue
        text = block.text
        style = (block.style.name if block.style is not None else "") or ""
        if text and style.startswith("Heading"):
            level = style.split()[-1]
            text = "#" * (int(level) if level.isdigit() else 1) + " " + text
        elif text and style == "Title":
            text = "# " + text
        lines.append(text)
    return "\n".join(lines).strip()


def _rows_as_csv(rows) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        cells = ["" if v is None else v.isoformat() if hasattr(v, "isoformat") else str(v) for v in row]
        while cells and cells[-1] == "":
            cells.pop()
        if cells:
            writer.writerow(cells)
    return out.getvalue().rstrip("\n")


def _xlsx(data: bytes) -> str:
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        parts = []
        for sheet in workbook.worksheets:
            parts.append(f"## Sheet: {sheet.title}")
            parts.append(_rows_as_csv(sheet.iter_rows(values_only=True)))
        return "\n".join(parts)
    finally:
        workbook.close()


def _csv(text: str) -> str:
    sample = text[:8192]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|") if sample.strip() else csv.excel
    except csv.Error:
        dialect = csv.excel
    return _rows_as_csv(csv.reader(io.StringIO(text), dialect))
