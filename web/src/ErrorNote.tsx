/** An error the page should show (a failed query or action), or nothing. */
export function ErrorNote({ error }: { error: unknown }) {
  if (error === null || error === undefined || error === false || error === '') return null;
  const text = error instanceof Error ? error.message : String(error);
  return (
    <p className="error" role="alert">
      {text}
    </p>
  );
}
