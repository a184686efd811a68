// The static HTML report's start: the report JSON beside this script in the same file, drawn
// by the dashboard's renderer; the address's #rule-id opens that rule.
import { renderReports } from "./report.js";

renderReports(document.getElementById("report"), JSON.parse(document.getElementById("report-data").textContent),
  { open: decodeURIComponent(location.hash.slice(1)) });
